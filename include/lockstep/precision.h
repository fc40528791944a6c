// The arithmetic precision of a training step's matrix products: mixed precision.
//
// kF32: everything in f32. kBF16 / kF16: every GEMM operand (weights, activations and gradients
// entering a matrix product, forward and backward) is rounded to bfloat16 / IEEE half, round to
// nearest even, and the products are accumulated and written in f32. Master weights, gradients,
// optimizer state and every other op stay f32. This is exactly what cuBLAS computes with 16-bit
// A and B, f32 C and CUBLAS_COMPUTE_32F. The host backend computes the same: bf16 on the CPU's
// bf16 units through oneDNN where the CPU has them (AVX512-BF16, AMX), else, like f16, by rounding
// the operands and multiplying in f32. The product of two bf16 (8-bit significand) or f16
// (11-bit) values is exact in f32, so only the summation order differs between backends.
// f16 has 5 exponent bits: gradients below 2^-24 flush to zero and values above 65504 become
// infinite, hence dynamic loss scaling (LossScaleConfig below).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <lockstep/dtype.h>

namespace ls {

enum class Precision : uint8_t { kF32, kBF16, kF16 };

const char* precision_name(Precision precision);  // "f32", "bf16", "f16"
// "f32", "bf16" or "f16"; nullopt for anything else.
std::optional<Precision> parse_precision(std::string_view name);

// x rounded to IEEE binary16 (nearest, ties to even; subnormals kept; from 65520, halfway past
// the largest finite half 65504, to +-infinity), returned as the f32 of that value. NaN stays
// NaN. Plain bit arithmetic, so every compiler (and nvcc's host pass) agrees.
inline float round_to_f16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t sign = bits & 0x80000000u, magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return x;  // infinity or NaN
  if (magnitude >= 0x477ff000u) {          // >= 65520: rounds past the largest half
    bits = sign | 0x7f800000u;
  } else if (magnitude < 0x38800000u) {  // below 2^-14: a half subnormal, multiple of 2^-24
    float scaled;
    std::memcpy(&scaled, &magnitude, 4);
    scaled = std::nearbyint(scaled * 16777216.0f) / 16777216.0f;  // exact scalings; ties to even
    std::memcpy(&bits, &scaled, 4);
    bits |= sign;
  } else {  // normal: keep 10 of the 23 significand bits, ties to even
    bits = sign | ((magnitude + 0x0fffu + ((magnitude >> 13) & 1u)) & ~0x1fffu);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

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

// Dynamic loss scaling (f16; run on the device, in the step). Defaults are PyTorch's GradScaler's.
// Precisions other than f16 never scale (their range is f32's).
struct LossScaleConfig {
  bool dynamic = true;  // false: the loss scale stays at initial_scale
  float initial_scale = 65536.0f;
  float growth = 2.0f;             // > 1
  float backoff = 0.5f;            // in (0, 1)
  int32_t growth_interval = 2000;  // good steps in a row before growing, >= 1
  float min_scale = 1.0f;
  float max_scale = 16777216.0f;  // 2^24
};

}  // namespace ls
