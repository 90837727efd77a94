#include "kernels/cpu/matrix.hpp"

#include "kernels/cpu/quant.hpp"

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

std::size_t row_bytes(WeightType type, std::size_t cols) {
  switch (type) {
    case WeightType::f32: return cols * 4;
    case WeightType::f16: return cols * 2;
    case WeightType::q8_0: return cols / kQuantBlock * kQ8_0BlockBytes;
    case WeightType::q4_0: return cols / kQuantBlock * kQ4_0BlockBytes;
  }
  return 0;
}

}  // namespace accord::cpu
