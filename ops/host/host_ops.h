// What the host kernels of every op family share: the chunk size of streaming kernels and
// enqueue_map, which runs an element-wise body over [0, n) on the stream's worker.
// Host kernels capture pointers and sizes by value and return at once; the buffers must stay
// valid until the stream has run the work. Work is split with host_parallel_for over the host
// device's cores; every reduction sums in a fixed order, so results do not depend on chunking.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine/core/host/host_device.h"

// On x86-64 with GCC or Clang, a function marked LS_VECTOR_CLONES is compiled three times
// (AVX-512, AVX2, baseline SSE2) and the loader picks the widest the CPU has, so the kernels that
// are pure arithmetic (GELU, softmax rows, the optimizers) run 8 or 16 lanes wide without
// building the library for one CPU. The ops are built without FMA contraction (CMakeLists.txt),
// so every clone rounds exactly like the baseline: results do not depend on the CPU's vector
// width or on how work is chunked.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__SANITIZE_THREAD__)
#define LS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LS_VECTOR_CLONES
#endif

namespace ls {

// Elements per host_parallel_for chunk for streaming kernels: large enough that the per-chunk
// overhead is negligible, small enough that a 1M-element tensor spreads over 64 cores.
inline constexpr int64_t kHostGrain = 16 * 1024;

// Whole rows of `cols` elements per chunk: about kHostGrain elements, at least one row.
inline int64_t rows_grain(int64_t cols) {
  return std::max<int64_t>(1, kHostGrain / std::max<int64_t>(1, cols));
}

// Columns per chunk for the kernels that sum each column over `rows` rows in row order (so they
// split columns only): about kHostGrain elements, at least 64 columns.
inline int64_t cols_grain(int64_t rows) {
  return std::max<int64_t>(64, kHostGrain / std::max<int64_t>(1, rows));
}

// sum over i in [0, n) of f(i) in T, in a fixed order the compiler vectorises (one running sum is
// a chain of dependent adds it must not reorder): term i goes to lane i % kLanes, and the lanes
// are added in lane order at the end. The same bits on every CPU, vector width and chunking.
template <typename T = float, int64_t kLanes = 16, typename F>
inline T lane_sum(int64_t n, F f) {
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += f(i + l);
  }
  for (; i < n; ++i) lanes[i % kLanes] += f(i);
  T total = 0;
  for (T v : lanes) total += v;
  return total;
}

// Runs body(begin, end) over [0, n) in chunks of kHostGrain elements on the stream's worker.
template <typename Body>
void enqueue_map(Stream& stream, int64_t n, Body body) {
  if (n <= 0) return;
  host_enqueue(stream, [n, body] { host_parallel_for(0, n, kHostGrain, body); });
}

// Runs body(first_row, end_row) over the rows of a [rows, cols] matrix on the stream's worker,
// in chunks of whole rows, about kHostGrain elements each.
template <typename Body>
void enqueue_rows(Stream& stream, int64_t rows, int64_t cols, Body body) {
  if (rows <= 0 || cols <= 0) return;
  host_enqueue(stream, [=] { host_parallel_for(0, rows, rows_grain(cols), body); });
}

}  // namespace ls
