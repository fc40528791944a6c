// The kernel table every backend implements: raw pointers, sizes and a stream.
//
// The tensor-level ops in ops/*.h check shapes, dtypes and devices, then call the table of the
// stream's device (kernels_for). Host kernels run on the host stream's worker inside the device's
// oneTBB arena; CUDA kernels are launched on the stream (cuBLAS for GEMM). Every call is
// asynchronous in stream order. All matrices are row-major and contiguous with the given leading
// dimension. `accumulate` means out += result, otherwise out = result.
// Reductions (bias_grad, softmax_xent's loss, count_correct) sum in a fixed order, so results are
// bitwise reproducible for the same inputs on the same backend.
#pragma once

#include <cstdint>

#include "engine/core/device.h"
#include "engine/core/stream.h"

namespace ls {

struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.0f;      // 0 disables the momentum buffer
  float weight_decay = 0.0f;  // L2 penalty added to the gradient (PyTorch SGD semantics)
};

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // decoupled: p *= 1 - lr * weight_decay (PyTorch AdamW semantics)
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  // C[m,n] = alpha * op(A) * op(B) + beta * C; op(A) is m x k, op(B) is k x n.
  // A is m x k (lda >= k) or, transposed, k x m (lda >= m); likewise B.
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc, Stream& stream) const = 0;

  // y[r,c] += bias[c]
  virtual void bias_add(float* y, const float* bias, int64_t rows, int64_t cols,
                        Stream& stream) const = 0;
  // dbias[c] (+)= sum over r of dy[r,c], summed in row order.
  virtual void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                         bool accumulate, Stream& stream) const = 0;

  virtual void relu(const float* x, float* y, int64_t n, Stream& stream) const = 0;
  // dx (+)= dy * (x > 0)
  virtual void relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                             bool accumulate, Stream& stream) const = 0;
  // GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  virtual void gelu(const float* x, float* y, int64_t n, Stream& stream) const = 0;
  virtual void gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                             bool accumulate, Stream& stream) const = 0;

  // Softmax + cross-entropy over rows in one pass. *loss = mean over rows of
  // -log softmax(logits[r])[labels[r]]; if dlogits is not null,
  // dlogits[r,c] = (softmax(logits[r])[c] - (c == labels[r])) * grad_scale.
  // Labels must lie in [0, cols); the host kernel raises an error otherwise.
  virtual void softmax_xent(const float* logits, const int32_t* labels, int64_t rows,
                            int64_t cols, float grad_scale, float* loss, float* dlogits,
                            Stream& stream) const = 0;
  // *correct = number of rows whose argmax (first maximum on ties) equals the label.
  virtual void count_correct(const float* logits, const int32_t* labels, int64_t rows,
                             int64_t cols, int32_t* correct, Stream& stream) const = 0;

  virtual void fill(float* x, int64_t n, float value, Stream& stream) const = 0;
  virtual void scale(float* x, int64_t n, float alpha, Stream& stream) const = 0;
  // y += alpha * x
  virtual void axpy(float alpha, const float* x, float* y, int64_t n, Stream& stream) const = 0;
  // out = a + b (out may alias a or b)
  virtual void add(const float* a, const float* b, float* out, int64_t n,
                   Stream& stream) const = 0;

  // *count = number of elements of x that are NaN or +-Inf (the non-finite check of a step).
  virtual void count_nonfinite(const float* x, int64_t n, int32_t* count, Stream& stream) const = 0;

  virtual void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& stream) const = 0;
  virtual void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& stream) const = 0;

  // PyTorch SGD: g = grad + wd * p; buf = momentum * buf + g (buf starts at 0); p -= lr * buf.
  // With momentum == 0, momentum_buf may be null and p -= lr * g.
  virtual void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                        const SgdConfig& config, Stream& stream) const = 0;
  // PyTorch AdamW, step counted from 1: p *= 1 - lr wd; m = b1 m + (1-b1) g;
  // v = b2 v + (1-b2) g^2; p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps).
  virtual void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                          const AdamWConfig& config, int64_t step, Stream& stream) const = 0;
};

// The table of the backend `device` belongs to. Asking for CUDA kernels in a build without CUDA
// is an error that says so.
const Kernels& kernels_for(Device device);

const Kernels& host_kernels();
const Kernels& cuda_kernels();

}  // namespace ls
