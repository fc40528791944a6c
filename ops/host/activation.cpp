// Host kernels of ops/activation.h: relu, gelu, gelu_erf and tanh, forward and backward. Each
// enqueues one task split over host_parallel_for; every element is computed independently. The
// inner loops are plain indexed loops so the compiler vectorises them (in-place use is allowed).
#include "ops/activation.h"

#include <algorithm>
#include <cmath>

#include <lockstep/dtype.h>

#include "ops/host/fast_math.h"
#include "ops/host/gelu_tanh.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// GELU, erf form, and its derivative: Phi(x) = 0.5 (1 + erf(x / sqrt 2)), gelu_erf = x Phi(x),
// gelu_erf' = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

inline float gelu_erf_value(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }

inline float gelu_erf_grad(float x) {
  return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

void relu(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      y[i] = v > 0.0f ? v : 0.0f;
    }
  });
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                bool accumulate, Stream& stream) {
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

LS_VECTOR_CLONES void gelu_range(const float* x, float* y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) y[i] = gelu_value(x[i]);
}

LS_VECTOR_CLONES void gelu_backward_range(const float* x, const float* dy, float* dx, int64_t b,
                                          int64_t e, bool accumulate) {
  if (accumulate) {
    for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * gelu_grad(x[i]);
  } else {
    for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * gelu_grad(x[i]);
  }
}

void gelu(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) { gelu_range(x, y, b, e); });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& stream) {
  enqueue_map(stream, n,
              [=](int64_t b, int64_t e) { gelu_backward_range(x, dy, dx, b, e, accumulate); });
}

void gelu_erf(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = gelu_erf_value(x[i]);
  });
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                       Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * gelu_erf_grad(x[i]);
    } else {
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * gelu_erf_grad(x[i]);
    }
  });
}

void tanh_op(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = host_math::fast_tanh(x[i]);
  });
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
    } else {
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
  });
}

// bias_gelu and its backward. The tanh form runs in the vector clones as gelu_range does and the
// erf form in plain code as gelu_erf does, so each computes the same bits as its unfused pair.
LS_VECTOR_CLONES void bias_gelu_row(const float* x, const float* bias, float* y, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) y[c] = gelu_value(x[c] + bias[c]);
}

void bias_gelu_erf_row(const float* x, const float* bias, float* y, int64_t cols) {
  for (int64_t c = 0; c < cols; ++c) y[c] = gelu_erf_value(x[c] + bias[c]);
}

void bias_gelu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols, bool erf,
               uint16_t* y16, Stream& stream) {
  enqueue_rows(stream, rows, cols, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (erf) {
        bias_gelu_erf_row(x + r * cols, bias, y + r * cols, cols);
      } else {
        bias_gelu_row(x + r * cols, bias, y + r * cols, cols);
      }
      if (y16 != nullptr) {
        for (int64_t c = 0; c < cols; ++c) y16[r * cols + c] = f32_to_bf16(y[r * cols + c]);
      }
    }
  });
}

// Columns [c0, c1) over every row, kSumBlock at a time: dx = dy gelu'(x + bias), and each
// column's sum of dx accumulated in row order (bias_grad's order) while dx is still in registers.
// The block is wide (8 KiB of sums, in L1) so that each row's run is long and contiguous: blocks
// of 256 columns, 1 KiB runs 4 KiB apart, measured 1.3x slower than the unfused pair.
constexpr int64_t kSumBlock = 2048;

// Always inlined, so that it is compiled into each vector clone of its caller.
template <typename Grad>
[[gnu::always_inline]] inline void bias_gelu_backward_block(const float* x,
                                                            const float* __restrict bias,
                                                            const float* dy, float* dx,
                                                            float* __restrict dbias, int64_t rows,
                                                            int64_t cols, int64_t cb, int64_t width,
                                                            bool accumulate, Grad grad) {
  float acc[kSumBlock];
  std::fill(acc, acc + width, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * cols + cb;
    for (int64_t j = 0; j < width; ++j) {
      const float g = dy[at + j] * grad(x[at + j] + bias[cb + j]);
      dx[at + j] = g;
      acc[j] += g;
    }
  }
  for (int64_t j = 0; j < width; ++j) dbias[cb + j] = accumulate ? dbias[cb + j] + acc[j] : acc[j];
}

LS_VECTOR_CLONES void bias_gelu_backward_cols(const float* x, const float* bias, const float* dy,
                                              float* dx, float* dbias, int64_t rows, int64_t cols,
                                              int64_t cb, int64_t width, bool accumulate) {
  bias_gelu_backward_block(x, bias, dy, dx, dbias, rows, cols, cb, width, accumulate,
                           [](float u) { return gelu_grad(u); });
}

void bias_gelu_erf_backward_cols(const float* x, const float* bias, const float* dy, float* dx,
                                 float* dbias, int64_t rows, int64_t cols, int64_t cb,
                                 int64_t width, bool accumulate) {
  bias_gelu_backward_block(x, bias, dy, dx, dbias, rows, cols, cb, width, accumulate,
                           [](float u) { return gelu_erf_grad(u); });
}

void bias_gelu_backward(const float* x, const float* bias, const float* dy, float* dx, float* dbias,
                        int64_t rows, int64_t cols, bool erf, bool accumulate_dbias,
                        Stream& stream) {
  if (cols <= 0) return;
  // Parallel over columns only, as bias_grad: each column's sum runs over the rows in order.
  host_enqueue(stream, [=] {
    host_parallel_for(0, cols, cols_grain(rows), [=](int64_t c0, int64_t c1) {
      for (int64_t cb = c0; cb < c1; cb += kSumBlock) {
        const int64_t width = std::min(kSumBlock, c1 - cb);
        if (erf) {
          bias_gelu_erf_backward_cols(x, bias, dy, dx, dbias, rows, cols, cb, width,
                                      accumulate_dbias);
        } else {
          bias_gelu_backward_cols(x, bias, dy, dx, dbias, rows, cols, cb, width, accumulate_dbias);
        }
      }
    });
  });
}

const ActivationOps kHostActivation{
    .relu = relu,
    .relu_backward = relu_backward,
    .gelu = gelu,
    .gelu_backward = gelu_backward,
    .gelu_erf = gelu_erf,
    .gelu_erf_backward = gelu_erf_backward,
    .tanh = tanh_op,
    .tanh_backward = tanh_backward,
    .bias_gelu = bias_gelu,
    .bias_gelu_backward = bias_gelu_backward,
};
LS_REGISTER_OP_TABLE(ActivationOps, DeviceKind::kHost, kHostActivation);

}  // namespace
}  // namespace ls
