// __half of the CPU emulator (LOCKSTEP_CUDA=EMULATED): IEEE binary16 with the GPU's conversions
// (round to nearest even; a NaN becomes the canonical NaN 0x7fff, as cvt.rn.f16.f32 makes it).
#pragma once

#include <math.h>

#include <bit>
#include <cstdint>

struct __half {
  uint16_t bits;
};

namespace ls::cuda_emu {

inline uint16_t f32_to_f16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7fff;                              // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude >= 0x38800000u) {  // a normal half: drop 13 mantissa bits, ties to even
    magnitude += 0xfffu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((magnitude - 0x38000000u) >> 13));
  }
  // Subnormal (or zero): a multiple of 2^-24; the scaling is exact, rintf rounds ties to even.
  const float units = rintf(std::bit_cast<float>(magnitude) * 16777216.0f);
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(units));
}

inline float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign != 0 ? -value : value;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace ls::cuda_emu

inline __half __float2half_rn(float f) { return {::ls::cuda_emu::f32_to_f16_bits(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float __half2float(__half h) { return ::ls::cuda_emu::f16_bits_to_f32(h.bits); }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short bits) { return {bits}; }
