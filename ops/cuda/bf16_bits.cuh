// f32 -> bf16 bits on the device, bit for bit ls::f32_to_bf16 (lockstep/dtype.h) and the host's
// round_to_bf16: round to nearest even, NaN stays a quiet NaN with its sign and top payload bits.
// Shared by the cast kernel and the kernels that write bf16 as they go (split_heads_bf16); and
// the exact widening back, for kernels that read bf16.
#pragma once

#include <cstdint>

namespace ls::cuda_ops {

__device__ inline uint16_t f32_to_bf16_bits(float x) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// bf16 bits -> f32: exact.
__device__ inline float bf16_bits_to_f32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

}  // namespace ls::cuda_ops
