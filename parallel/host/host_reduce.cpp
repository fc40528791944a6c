// The host collectives' reduction and copy loops (see parallel/host/host_reduce.h).
// The reduction works in tiles of kTile elements with an f32 accumulator on the stack: load
// rank 0's tile, combine ranks 1..n-1 into it, then store. The inner loops are plain
// element-wise loops over contiguous arrays, which the compiler vectorises.
#include "parallel/host/host_reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/error.h"
#include "engine/host/host_device.h"

namespace ls {
namespace {

constexpr size_t kTile = 512;                // 2 KiB of f32 accumulator: stays in L1
constexpr int64_t kReduceGrain = 64 * 1024;  // elements per host_parallel_for chunk, at least
constexpr int64_t kCopyGrain = 1 << 20;      // bytes per host_parallel_for chunk, at least

inline float load(float x) { return x; }
inline float load(uint16_t x) { return bf16_to_f32(x); }
inline void store(float* out, float x) { *out = x; }
inline void store(uint16_t* out, float x) { *out = f32_to_bf16(x); }

template <ReduceOp kOp>
inline float combine(float acc, float x) {
  if constexpr (kOp == ReduceOp::kMax) {
    return (x > acc || x != x) ? x : acc;  // NaN wins, as in any IEEE-aware max
  } else {
    return acc + x;
  }
}

template <typename T, ReduceOp kOp>
void reduce_tile(const void* const* inputs, int n, size_t offset, T* out, size_t len) {
  float acc[kTile];
  const T* first = static_cast<const T*>(inputs[0]) + offset;
  for (size_t i = 0; i < len; ++i) acc[i] = load(first[i]);
  for (int k = 1; k < n; ++k) {
    const T* in = static_cast<const T*>(inputs[k]) + offset;
    for (size_t i = 0; i < len; ++i) acc[i] = combine<kOp>(acc[i], load(in[i]));
  }
  if constexpr (kOp == ReduceOp::kAvg) {
    const float divisor = static_cast<float>(n);
    for (size_t i = 0; i < len; ++i) acc[i] /= divisor;
  }
  for (size_t i = 0; i < len; ++i) store(out + i, acc[i]);
}

template <typename T, ReduceOp kOp>
void reduce_range(const void* const* inputs, int n, size_t offset, void* out, size_t count) {
  T* typed_out = static_cast<T*>(out);
  host_parallel_for(0, static_cast<int64_t>(count), kReduceGrain, [&](int64_t begin, int64_t end) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); i += kTile) {
      const size_t len = std::min(kTile, static_cast<size_t>(end) - i);
      reduce_tile<T, kOp>(inputs, n, offset + i, typed_out + i, len);
    }
  });
}

template <typename T>
void reduce_typed(const void* const* inputs, int n, size_t offset, void* out, size_t count,
                  ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return reduce_range<T, ReduceOp::kSum>(inputs, n, offset, out, count);
    case ReduceOp::kAvg: return reduce_range<T, ReduceOp::kAvg>(inputs, n, offset, out, count);
    case ReduceOp::kMax: return reduce_range<T, ReduceOp::kMax>(inputs, n, offset, out, count);
  }
  LS_ASSERT(false, "unknown reduce op ", static_cast<int>(op));
}

}  // namespace

void host_reduce(const void* const* inputs, int n, size_t offset, void* out, size_t count,
                 DType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (dtype) {
    case DType::kF32: return reduce_typed<float>(inputs, n, offset, out, count, op);
    case DType::kBF16: return reduce_typed<uint16_t>(inputs, n, offset, out, count, op);
    case DType::kI32: break;
  }
  LS_ASSERT(false, "host_reduce: unsupported dtype ", dtype_name(dtype));
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
