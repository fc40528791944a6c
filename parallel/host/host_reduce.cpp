// The host collectives' reduction and copy loops (see parallel/host/host_reduce.h).
// The reduction works in tiles of kTile elements with an f32 accumulator on the stack: ranks 0
// and 1 are combined in one fused pass, ranks 2..n-1 added in order, then the tile is stored to
// each output. The inner loops are plain element-wise loops over contiguous arrays, which the
// compiler vectorises; the accumulator stays in L1, so each input is read from memory once.
#include "parallel/host/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"

namespace ls {
namespace {

constexpr size_t kTile = 512;                // 2 KiB of f32 accumulator: stays in L1
constexpr int64_t kReduceGrain = 64 * 1024;  // elements per host_parallel_for chunk, at least
constexpr int64_t kCopyGrain = 1 << 20;      // bytes per host_parallel_for chunk, at least

inline float load(float x) { return x; }
inline float load(uint16_t x) { return bf16_to_f32(x); }

template <ReduceOp kOp>
inline float combine(float acc, float x) {
  if constexpr (kOp == ReduceOp::kMax) {
    return (x > acc || x != x) ? x : acc;  // NaN wins, as in any IEEE-aware max
  } else {
    return acc + x;
  }
}

// Reduces inputs[k][offset, offset + len) into outputs[o][at, at + len) for every o.
inline void store_tile(float* __restrict out, const float* __restrict acc, size_t len) {
  for (size_t i = 0; i < len; ++i) out[i] = acc[i];
}
inline void store_tile(uint16_t* __restrict out, const float* __restrict acc, size_t len) {
  for (size_t i = 0; i < len; ++i) out[i] = f32_to_bf16(acc[i]);
}

template <typename T, ReduceOp kOp>
void reduce_tile(const void* const* inputs, int n, size_t offset, T* const* outputs, int n_out,
                 size_t at, size_t len) {
  float acc[kTile];
  const T* __restrict first = static_cast<const T*>(inputs[0]) + offset;
  if (n == 1) {
    for (size_t i = 0; i < len; ++i) acc[i] = load(first[i]);
  } else {
    const T* __restrict second = static_cast<const T*>(inputs[1]) + offset;
    for (size_t i = 0; i < len; ++i) acc[i] = combine<kOp>(load(first[i]), load(second[i]));
  }
  for (int k = 2; k < n; ++k) {
    const T* __restrict in = static_cast<const T*>(inputs[k]) + offset;
    for (size_t i = 0; i < len; ++i) acc[i] = combine<kOp>(acc[i], load(in[i]));
  }
  if constexpr (kOp == ReduceOp::kAvg) {
    const float divisor = static_cast<float>(n);
    for (size_t i = 0; i < len; ++i) acc[i] /= divisor;
  }
  for (int o = 0; o < n_out; ++o) store_tile(outputs[o] + at, acc, len);
}

// Reduces inputs[k][offset, offset + count) into outputs[o][0, count) for every o.
template <typename T, ReduceOp kOp>
void reduce_range(const void* const* inputs, int n, void* const* outputs, int n_out,
                  size_t offset, size_t count) {
  thread_local std::vector<T*> typed;  // reused: a collective allocates nothing
  typed.resize(static_cast<size_t>(n_out));
  for (int o = 0; o < n_out; ++o) typed[static_cast<size_t>(o)] = static_cast<T*>(outputs[o]);
  host_parallel_for(0, static_cast<int64_t>(count), kReduceGrain, [&](int64_t begin, int64_t end) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); i += kTile) {
      const size_t len = std::min(kTile, static_cast<size_t>(end) - i);
      reduce_tile<T, kOp>(inputs, n, offset + i, typed.data(), n_out, i, len);
    }
  });
}

template <typename T>
void reduce_typed(const void* const* inputs, int n, void* const* outputs, int n_out,
                  size_t offset, size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return reduce_range<T, ReduceOp::kSum>(inputs, n, outputs, n_out, offset, count);
    case ReduceOp::kAvg:
      return reduce_range<T, ReduceOp::kAvg>(inputs, n, outputs, n_out, offset, count);
    case ReduceOp::kMax:
      return reduce_range<T, ReduceOp::kMax>(inputs, n, outputs, n_out, offset, count);
  }
  LS_ASSERT(false, "unknown reduce op ", static_cast<int>(op));
}

}  // namespace

void host_reduce_to_all(const void* const* inputs, int n, void* const* outputs, int n_out,
                        size_t offset, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  LS_ASSERT(n_out >= 1, "host_reduce_to_all: no outputs");
  switch (dtype) {
    case DType::kF32: return reduce_typed<float>(inputs, n, outputs, n_out, offset, count, op);
    case DType::kBF16: return reduce_typed<uint16_t>(inputs, n, outputs, n_out, offset, count, op);
    case DType::kI32: break;
  }
  LS_ASSERT(false, "host_reduce: unsupported dtype ", dtype_name(dtype));
}

void host_reduce(const void* const* inputs, int n, size_t offset, void* out, size_t count,
                 DType dtype, ReduceOp op) {
  host_reduce_to_all(inputs, n, &out, 1, offset, count, dtype, op);
}

void host_copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  host_parallel_for(0, static_cast<int64_t>(bytes), kCopyGrain, [&](int64_t begin, int64_t end) {
    std::memcpy(d + begin, s + begin, static_cast<size_t>(end - begin));
  });
}

}  // namespace ls
