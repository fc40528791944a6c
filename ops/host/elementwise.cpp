// Host element-wise kernels: bias add/grad, relu, gelu, fill, scale, axpy, add and bf16 casts.
// Each kernel enqueues one task that splits its range over host_parallel_for (kHostGrain elements
// a chunk); every element is computed independently, so results do not depend on the chunking.
// An output may be exactly one of the inputs (in place), never a partial overlap; the inner
// loops are plain indexed loops so the compiler vectorises them (with a runtime alias check
// where in-place use is allowed, restrict where the buffers are always distinct).
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>

#include "engine/core/dtype.h"
#include "engine/core/host/host_device.h"
#include "ops/host/host_kernels.h"

namespace ls {
namespace {

// Runs body(begin, end) over [0, n) in chunks of kHostGrain elements on the stream's worker.
template <typename Body>
void enqueue_map(Stream& stream, int64_t n, Body body) {
  if (n <= 0) return;
  host_enqueue(stream, [n, body] { host_parallel_for(0, n, kHostGrain, body); });
}

// Columns summed together in bias_grad: the accumulators stay in registers/L1 while the rows
// stream past, and each column is still summed strictly in row order.
constexpr int64_t kBiasGradBlock = 256;

void bias_grad_cols(const float* __restrict dy, float* __restrict dbias, int64_t rows, int64_t cols,
                    int64_t c0, int64_t c1, bool accumulate) {
  float acc[kBiasGradBlock];
  for (int64_t cb = c0; cb < c1; cb += kBiasGradBlock) {
    const int64_t width = std::min(kBiasGradBlock, c1 - cb);
    std::fill(acc, acc + width, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict row = dy + r * cols + cb;
      for (int64_t j = 0; j < width; ++j) acc[j] += row[j];
    }
    if (accumulate) {
      for (int64_t j = 0; j < width; ++j) dbias[cb + j] += acc[j];
    } else {
      std::copy(acc, acc + width, dbias + cb);
    }
  }
}

// GELU, tanh form, and its exact derivative:
//   u = s (x + a x^3), t = tanh(u), gelu = 0.5 x (1 + t),
//   gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) s (1 + 3 a x^2).
constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

inline float gelu_value(float x) {
  const float t = std::tanh(kGeluS * (x + kGeluA * x * x * x));
  return 0.5f * x * (1.0f + t);
}

inline float gelu_grad(float x) {
  const float x2 = x * x;
  const float t = std::tanh(kGeluS * (x + kGeluA * x2 * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluS * (1.0f + 3.0f * kGeluA * x2);
}

}  // namespace

void HostKernels::bias_add(float* y, const float* bias, int64_t rows, int64_t cols,
                           Stream& stream) const {
  if (rows <= 0 || cols <= 0) return;
  const int64_t grain_rows = std::max<int64_t>(1, kHostGrain / cols);
  host_enqueue(stream, [=] {
    host_parallel_for(0, rows, grain_rows, [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* __restrict row = y + r * cols;
        const float* __restrict b = bias;
        for (int64_t c = 0; c < cols; ++c) row[c] += b[c];
      }
    });
  });
}

void HostKernels::bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                            bool accumulate, Stream& stream) const {
  if (cols <= 0) return;
  // Parallel over columns only: each column's sum runs over the rows in order (deterministic).
  const int64_t grain_cols = std::max<int64_t>(64, kHostGrain / std::max<int64_t>(rows, 1));
  host_enqueue(stream, [=] {
    host_parallel_for(0, cols, grain_cols, [=](int64_t c0, int64_t c1) {
      bias_grad_cols(dy, dbias, rows, cols, c0, c1, accumulate);
    });
  });
}

void HostKernels::relu(const float* x, float* y, int64_t n, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      y[i] = v > 0.0f ? v : 0.0f;
    }
  });
}

void HostKernels::relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                bool accumulate, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) {
        const float g = dy[i];  // loaded unconditionally so the select vectorises
        dx[i] += x[i] > 0.0f ? g : 0.0f;
      }
    } else {
      for (int64_t i = b; i < e; ++i) {
        const float g = dy[i];
        dx[i] = x[i] > 0.0f ? g : 0.0f;
      }
    }
  });
}

void HostKernels::gelu(const float* x, float* y, int64_t n, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = gelu_value(x[i]);
  });
}

void HostKernels::gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                bool accumulate, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * gelu_grad(x[i]);
    } else {
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * gelu_grad(x[i]);
    }
  });
}

void HostKernels::fill(float* x, int64_t n, float value, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) { std::fill(x + b, x + e, value); });
}

void HostKernels::scale(float* x, int64_t n, float alpha, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] *= alpha;
  });
}

void HostKernels::axpy(float alpha, const float* x, float* y, int64_t n, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += alpha * x[i];
  });
}

void HostKernels::add(const float* a, const float* b, float* out, int64_t n, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
  });
}

void HostKernels::cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f32_to_bf16(x[i]);
  });
}

void HostKernels::cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& stream) const {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = bf16_to_f32(x[i]);
  });
}

}  // namespace ls

namespace ls {

void HostKernels::count_nonfinite(const float* x, int64_t n, int32_t* count, Stream& stream) const {
  host_enqueue(stream, [x, n, count] {
    // Integer counts add up the same in any order, so the chunks may combine as they finish.
    std::atomic<int64_t> total{0};
    host_parallel_for(0, n, kHostGrain, [&](int64_t begin, int64_t end) {
      int64_t local = 0;
      for (int64_t i = begin; i < end; ++i) local += !std::isfinite(x[i]);
      total += local;
    });
    *count = static_cast<int32_t>(std::min<int64_t>(total, INT32_MAX));
  });
}

}  // namespace ls
