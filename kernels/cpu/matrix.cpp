#include "kernels/cpu/matrix.hpp"

namespace accord::cpu {

const char* to_string(WeightType type) {
  switch (type) {
    case WeightType::f32: return "F32";
    case WeightType::f16: return "F16";
    case WeightType::q8_0: return "Q8_0";
    case WeightType::q4_0: return "Q4_0";
  }
  return "?";
}

}  // namespace accord::cpu
