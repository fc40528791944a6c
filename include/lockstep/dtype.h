// Element types a Tensor can hold, and bf16 <-> f32 conversion shared by host kernels and tests.
// bf16 is stored as the upper 16 bits of an IEEE f32; conversion rounds to nearest even and keeps
// NaN a NaN, matching CUDA's __float2bfloat16.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace ls {

enum class DType : uint8_t { kF32, kBF16, kI32 };

constexpr size_t dtype_size(DType t) { return t == DType::kBF16 ? 2 : 4; }
std::string_view dtype_name(DType t);

inline uint16_t f32_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);                // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

inline float bf16_to_f32(uint16_t x) {
  uint32_t bits = static_cast<uint32_t>(x) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

}  // namespace ls
