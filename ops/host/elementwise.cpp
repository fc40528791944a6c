// Host kernels of ops/elementwise.h: fill, scale, axpy, add, the non-finite count and the bf16
// casts. Each enqueues one task split over host_parallel_for (kHostGrain elements a chunk); every
// element is computed independently, so results do not depend on the chunking.
#include "ops/elementwise.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>

#include <lockstep/dtype.h>
#include "ops/host/bf16_convert.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

void fill(float* x, int64_t n, float value, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) { std::fill(x + b, x + e, value); });
}

void scale(float* x, int64_t n, float alpha, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= alpha;
  });
}

void axpy(float alpha, const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += alpha * x[i];
  });
}

void add(const float* a, const float* b, float* out, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  });
}

// Integer counts add up the same in any order, so the chunks may combine as they finish.
template <typename Count>
void count_nonfinite_as(const float* x, int64_t n, Count* count, Stream& stream) {
  host_enqueue(stream, [x, n, count] {
    std::atomic<int64_t> total{0};
    host_parallel_for(0, n, kHostGrain, [&](int64_t begin, int64_t end) {
      int64_t local = 0;
      for (int64_t i = begin; i < end; ++i) local += !std::isfinite(x[i]);
      total += local;
    });
    *count = static_cast<Count>(std::min<int64_t>(total, INT32_MAX));
  });
}

void count_nonfinite(const float* x, int64_t n, int32_t* count, Stream& stream) {
  count_nonfinite_as(x, n, count, stream);
}

void count_nonfinite_f32(const float* x, int64_t n, float* count, Stream& stream) {
  count_nonfinite_as(x, n, count, stream);
}

void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& stream) {
  // round_to_bf16: f32_to_bf16's bits, on the CPU's conversion instruction where it has one.
  enqueue_map(stream, n, [=](int64_t b, int64_t e) { round_to_bf16(x + b, e - b, y + b); });
}

void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) { widen_bf16(x + b, e - b, y + b); });
}

void fill_columns_bf16(uint16_t* x, int64_t rows, int64_t cols, int64_t first, uint16_t value,
                       Stream& stream) {
  enqueue_rows(stream, rows, cols, [=](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) std::fill(x + r * cols + first, x + (r + 1) * cols, value);
  });
}

const ElementwiseOps kHostElementwise{
    .fill = fill,
    .scale = scale,
    .axpy = axpy,
    .add = add,
    .count_nonfinite = count_nonfinite,
    .count_nonfinite_f32 = count_nonfinite_f32,
    .cast_f32_to_bf16 = cast_f32_to_bf16,
    .cast_bf16_to_f32 = cast_bf16_to_f32,
    .fill_columns_bf16 = fill_columns_bf16,
};
LS_REGISTER_OP_TABLE(ElementwiseOps, DeviceKind::kHost, kHostElementwise);

}  // namespace
}  // namespace ls
