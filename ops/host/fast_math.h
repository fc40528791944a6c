// exp and tanh for host kernels, written as branch-free arithmetic so the compiler vectorises the
// loops that call them (libm's expf/tanhf are scalar calls: tanh GELU through tanhf cost more
// than the GEMMs of a transformer step).
//
// fast_exp: relative error < 2e-7 over [-87, 88] (round to nearest power of two, then a degree-7
// polynomial of the remainder); below -87 it returns 0 (flushing what would be subnormal), from
// 88 to 88.72 e^88, above that +inf (as e^x overflows f32); NaN in gives NaN out. fast_tanh:
// absolute error < 3e-7; saturates to +-1 for |x| > 9.1. Both are pure functions, the same on every
// call (deterministic). fast_exp_in_range: fast_exp without the range checks, for arguments the
// caller keeps in [-87, 88].
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ls::host_math {

// fast_exp for x already in [-87, 88], without the range checks (a caller that clamps its
// argument anyway: GELU). Bit for bit fast_exp there.
inline float fast_exp_in_range(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // ln 2 split in two for an exact k * ln2
  constexpr float kLn2Lo = 1.42860682030941723212e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to int
  const float k = (x * kLog2e + kRound) - kRound;
  const float r = (x - k * kLn2Hi) - k * kLn2Lo;  // |r| <= ln2 / 2
  // e^r by its Taylor polynomial to degree 7 (remainder < 6e-9 relative on |r| <= 0.347).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k by building the float's exponent field; k in [-126, 128) here.
  const int32_t e = static_cast<int32_t>(k) + 127;  // k in [-126, 127]: e in [1, 254]
  const int32_t bits = e << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float fast_exp(float x) {
  // Ternaries rather than fmin/fmax/nearbyint: they vectorise without -ffast-math. A NaN fails
  // both comparisons and stays NaN through the arithmetic of fast_exp_in_range.
  const float clamped = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float value = fast_exp_in_range(clamped);
  return x < -87.0f ? 0.0f : (x > 88.72f ? INFINITY : value);
}

inline float fast_tanh(float x) {
  // tanh x = 1 - 2 / (e^{2x} + 1), on x clamped to [-10, 10] (tanh rounds to +-1 in f32
  // beyond 9.1).
  const float c = x < -10.0f ? -10.0f : (x > 10.0f ? 10.0f : x);
  return 1.0f - 2.0f / (fast_exp(2.0f * c) + 1.0f);
}

}  // namespace ls::host_math
