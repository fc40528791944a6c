// __nv_bfloat16 of the CPU emulator (LOCKSTEP_CUDA=EMULATED): the top 16 bits of an f32, with
// the GPU's conversion (round to nearest even; a NaN becomes the canonical NaN 0x7fff, as
// cvt.rn.bf16.f32 makes it).
#pragma once

#include <bit>
#include <cstdint>

struct __nv_bfloat16 {
  uint16_t bits;
};

namespace ls::cuda_emu {

inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace ls::cuda_emu

inline __nv_bfloat16 __float2bfloat16(float f) { return {::ls::cuda_emu::f32_to_bf16_bits(f)}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16);
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { return {bits}; }
