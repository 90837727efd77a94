#include "kernels/cpu/matrix.hpp"

#include <cstring>

namespace accord::cpu {

const char* to_string(WeightType type) { return traits(type).name; }

void dequantize_values(WeightType type, float* dst, const std::byte* src, std::size_t n) {
  switch (type) {
    case WeightType::f32: std::memcpy(dst, src, n * sizeof(float)); break;
    case WeightType::f16: dequantize_f16(dst, src, n); break;
    case WeightType::q8_0: dequantize_q8_0(dst, src, n); break;
    case WeightType::q4_0: dequantize_q4_0(dst, src, n); break;
    case WeightType::bf16: dequantize_bf16(dst, src, n); break;
    case WeightType::q2_k: dequantize_q2_k(dst, src, n); break;
    case WeightType::q3_k: dequantize_q3_k(dst, src, n); break;
    case WeightType::q4_k: dequantize_q4_k(dst, src, n); break;
    case WeightType::q5_k: dequantize_q5_k(dst, src, n); break;
    case WeightType::q6_k: dequantize_q6_k(dst, src, n); break;
    case WeightType::iq4_xs: dequantize_iq4_xs(dst, src, n); break;
    case WeightType::q4_1: dequantize_q4_1(dst, src, n); break;
    case WeightType::q5_0: dequantize_q5_0(dst, src, n); break;
    case WeightType::q5_1: dequantize_q5_1(dst, src, n); break;
    case WeightType::iq4_nl: dequantize_iq4_nl(dst, src, n); break;
  }
}

void quantize_values(WeightType type, std::byte* dst, const float* src, std::size_t n) {
  switch (type) {
    case WeightType::f32: std::memcpy(dst, src, n * sizeof(float)); break;
    case WeightType::f16: quantize_f16(dst, src, n); break;
    case WeightType::q8_0: quantize_q8_0(dst, src, n); break;
    case WeightType::q4_0: quantize_q4_0(dst, src, n); break;
    case WeightType::bf16: quantize_bf16(dst, src, n); break;
    case WeightType::q2_k: quantize_q2_k(dst, src, n); break;
    case WeightType::q3_k: quantize_q3_k(dst, src, n); break;
    case WeightType::q4_k: quantize_q4_k(dst, src, n); break;
    case WeightType::q5_k: quantize_q5_k(dst, src, n); break;
    case WeightType::q6_k: quantize_q6_k(dst, src, n); break;
    case WeightType::iq4_xs: quantize_iq4_xs(dst, src, n); break;
    case WeightType::q4_1: quantize_q4_1(dst, src, n); break;
    case WeightType::q5_0: quantize_q5_0(dst, src, n); break;
    case WeightType::q5_1: quantize_q5_1(dst, src, n); break;
    case WeightType::iq4_nl: quantize_iq4_nl(dst, src, n); break;
  }
}

}  // namespace accord::cpu
