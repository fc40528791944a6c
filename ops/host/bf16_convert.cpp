// f32 <-> bf16 conversion of arrays: ops/host/bf16_convert.h says what and why.
#include "ops/host/bf16_convert.h"

#include <lockstep/dtype.h>

#include <cstring>

#include "ops/host/host_ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_THREAD__)
#define LS_HAVE_BF16_INSTRUCTIONS 1
#include <immintrin.h>
#endif

namespace ls {
namespace {

LS_VECTOR_CLONES void round_portable(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {  // f32_to_bf16 without its branch, so that it vectorises
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    const uint32_t nearest = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;  // ties to even
    const uint32_t quiet_nan = (bits >> 16) | 0x40u;
    out[i] = static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
  }
}

#if LS_HAVE_BF16_INSTRUCTIONS
bool cpu_has_bf16_instructions() {
  static const bool has = __builtin_cpu_supports("avx512bf16") != 0;
  return has;
}

__attribute__((target("avx512f,avx512bf16"))) void round_avx512_bf16(const float* x, int64_t n,
                                                                     uint16_t* out) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i significand = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i bits = _mm512_castps_si512(v);
    // Subnormal: exponent field 0, significand not. The instruction would flush it to zero.
    const __mmask16 subnormal =
        _mm512_testn_epi32_mask(bits, exponent) & _mm512_test_epi32_mask(bits, significand);
    if (subnormal != 0) [[unlikely]] {
      round_portable(x + i, 16, out + i);
      continue;
    }
    const __m256bh rounded = _mm512_cvtneps_pbh(v);
    std::memcpy(out + i, &rounded, sizeof rounded);
  }
  round_portable(x + i, n - i, out + i);
}
#endif

}  // namespace

void round_to_bf16_portable(const float* x, int64_t n, uint16_t* out) { round_portable(x, n, out); }

LS_VECTOR_CLONES void widen_bf16(const uint16_t* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(x[i]);
}

LS_VECTOR_CLONES void round_to_bf16_values(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void round_to_bf16(const float* x, int64_t n, uint16_t* out) {
#if LS_HAVE_BF16_INSTRUCTIONS
  if (cpu_has_bf16_instructions()) {
    round_avx512_bf16(x, n, out);
    return;
  }
#endif
  round_portable(x, n, out);
}

}  // namespace ls
