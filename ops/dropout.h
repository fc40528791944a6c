// Counter-based (stateless) dropout on f32 tensors. Kernels: ops/host/dropout.cpp,
// ops/cuda/dropout.cu.
//
// x and y have the same numel n, viewed as rows of row_len elements; element i is at position
// i % row_len of global row first_row + i / row_len. It is kept when
// dropout_uniform(key, row, position) >= p, and then y = x / (1 - p) (x * (1 / (1 - p)) in f32);
// otherwise y = 0. `accumulate` adds into y instead. The mask is a pure function of (key, global
// row, position) computed with the same integer hash on host and CUDA, so a batch split over
// replicas (or calls) drops exactly what one call over the whole batch drops. The op is its own
// backward: call it with (dy, dx) and the same key/row_len/first_row/p. y may be x (in place).
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

#ifdef __CUDACC__
#define LS_DROPOUT_HD __host__ __device__
#else
#define LS_DROPOUT_HD
#endif

namespace ls {

// splitmix64's finaliser: a bijection on 64 bits with full avalanche.
LS_DROPOUT_HD inline uint64_t dropout_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The per-row half of the hash (hoisted out of the loop over a row's positions).
LS_DROPOUT_HD inline uint64_t dropout_row_hash(uint64_t key, uint64_t row) {
  return dropout_mix64(key ^ dropout_mix64(row + 0x9E3779B97F4A7C15ull));
}

// 24 uniform bits of (key, row, position): the element is kept when this is >= the threshold.
LS_DROPOUT_HD inline uint32_t dropout_bits(uint64_t row_hash, uint64_t position) {
  return static_cast<uint32_t>(dropout_mix64(row_hash + position * 0xD1B54A32D192ED03ull) >> 40);
}

// dropout_bits as a uniform float in [0, 1), exactly (multiples of 2^-24).
inline float dropout_uniform(uint64_t key, int64_t row, int64_t position) {
  return static_cast<float>(dropout_bits(dropout_row_hash(key, static_cast<uint64_t>(row)),
                                         static_cast<uint64_t>(position))) *
         (1.0f / 16777216.0f);
}

// The smallest 24-bit value u with u * 2^-24 >= p: keep <=> dropout_bits >= this.
inline uint32_t dropout_threshold(float p) {
  const double scaled = static_cast<double>(p) * 16777216.0;
  auto t = static_cast<uint32_t>(scaled);
  return static_cast<double>(t) < scaled ? t + 1 : t;
}

// A fresh key per (seed, step, site): site tells dropout layers apart (e.g. layer * 8 + slot).
// The same arguments give the same key on every process.
inline uint64_t dropout_key(uint64_t seed, int64_t step, uint64_t site) {
  return dropout_mix64(dropout_mix64(seed ^ dropout_mix64(site + 0x632BE59BD9B4E019ull)) +
                       static_cast<uint64_t>(step));
}

struct DropoutOps {
  // y (+)= keep ? x * scale : 0 over n elements, keep = dropout_bits(row hash of
  // first_row + i / row_len, i % row_len) >= threshold (see dropout_threshold); y may be x.
  void (*dropout)(const float* x, float* y, int64_t n, int64_t row_len, int64_t first_row,
                  uint32_t threshold, float scale, uint64_t key, bool accumulate,
                  Stream& stream) = nullptr;
};

inline void dropout(const Tensor& x, const Tensor& y, int64_t row_len, int64_t first_row, float p,
                    uint64_t key, bool accumulate, Stream& stream) {
  op_check::tensor("dropout", "x", x, DType::kF32, stream);
  op_check::tensor("dropout", "y", y, DType::kF32, stream);
  op_check::same_numel("dropout", "y", y, "x", x);
  LS_CHECK(p >= 0.0f && p < 1.0f, "dropout: p is ", p,
           "; expected a drop probability in [0, 1) (use p = 0 for no dropout)");
  LS_CHECK(row_len > 0 && x.numel() % row_len == 0, "dropout: row_len is ", row_len, " but x is ",
           x.describe(), "; expected a positive row length that divides its ", x.numel(),
           " elements (e.g. the size of its last dimension)");
  LS_CHECK(first_row >= 0, "dropout: first_row is ", first_row,
           "; expected the (non-negative) global index of x's first row");
  const float scale = 1.0f / (1.0f - p);
  op_entry(
      &DropoutOps::dropout, "dropout", stream,
      [&] {
        return OpLaunches{ledger::moves("dropout_kernel", {&x, &y, accumulate ? &y : nullptr})};
      })(x.f32(), y.f32(), x.numel(), row_len, first_row, dropout_threshold(p), scale, key,
         accumulate, stream);
}

}  // namespace ls
