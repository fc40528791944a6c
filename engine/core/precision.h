// The arithmetic precision of a training step's matrix products (issue 12: mixed precision).
//
// kF32: everything in f32. kBF16 / kF16: every GEMM operand (weights, activations and gradients
// entering a matrix product, forward and backward) is rounded to bfloat16 / IEEE half, round to
// nearest even, and the products are accumulated and written in f32. Master weights, gradients,
// optimizer state and every other op stay f32. This is exactly what cuBLAS computes with 16-bit
// A and B, f32 C and CUBLAS_COMPUTE_32F, so the host backend emulates it by rounding the operands
// and multiplying in f32: the product of two bf16 (8-bit significand) or f16 (11-bit) values is
// exact in f32, and only the summation order differs between backends.
// f16 has 5 exponent bits: gradients below 2^-24 flush to zero and values above 65504 become
// infinite, hence the dynamic loss scaling of ops/step_control.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "engine/core/dtype.h"

namespace ls {

enum class Precision : uint8_t { kF32, kBF16, kF16 };

const char* precision_name(Precision precision);  // "f32", "bf16", "f16"
// "f32", "bf16" or "f16"; nullopt for anything else.
std::optional<Precision> parse_precision(std::string_view name);

// x rounded to IEEE binary16 (nearest, ties to even; subnormals kept; beyond the largest finite
// half, 65504, to +-infinity), returned as the f32 of that value. NaN stays NaN.
inline float round_to_f16(float x) { return static_cast<float>(static_cast<_Float16>(x)); }

// x rounded to bfloat16 (nearest, ties to even), as the f32 of that value. NaN stays NaN.
inline float round_to_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

inline float round_to(Precision precision, float x) {
  switch (precision) {
    case Precision::kF32: return x;
    case Precision::kBF16: return round_to_bf16(x);
    case Precision::kF16: return round_to_f16(x);
  }
  return x;
}

}  // namespace ls
