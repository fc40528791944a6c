// The host (CPU) backend's kernel table. Every method checks nothing about tensors (ops/*.cpp did
// that), enqueues its work on the host stream with host_enqueue and returns at once; pointers,
// sizes and configs are captured by value, so the buffers must stay valid until the stream has
// run the work. Work is split with host_parallel_for over the current host device's cores; every
// reduction sums in a fixed order, so results are bitwise identical whatever the chunking.
// Definitions: ops/host/gemm.cpp, elementwise.cpp, softmax_xent.cpp, optim.cpp.
#pragma once

#include <cstdint>

#include "ops/kernels.h"

namespace ls {

// Elements per host_parallel_for chunk for streaming kernels: large enough that the per-chunk
// overhead is negligible, small enough that a 1M-element tensor spreads over 64 cores.
inline constexpr int64_t kHostGrain = 16 * 1024;

class HostKernels final : public Kernels {
 public:
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc, Stream& stream) const override;

  void bias_add(float* y, const float* bias, int64_t rows, int64_t cols,
                Stream& stream) const override;
  void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
                 Stream& stream) const override;

  void relu(const float* x, float* y, int64_t n, Stream& stream) const override;
  void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                     Stream& stream) const override;
  void gelu(const float* x, float* y, int64_t n, Stream& stream) const override;
  void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                     Stream& stream) const override;

  void softmax_xent(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                    float grad_scale, float* loss, float* dlogits, Stream& stream) const override;
  void count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                     int32_t* correct, Stream& stream) const override;

  void fill(float* x, int64_t n, float value, Stream& stream) const override;
  void scale(float* x, int64_t n, float alpha, Stream& stream) const override;
  void axpy(float alpha, const float* x, float* y, int64_t n, Stream& stream) const override;
  void add(const float* a, const float* b, float* out, int64_t n, Stream& stream) const override;

  void count_nonfinite(const float* x, int64_t n, int32_t* count, Stream& stream) const override;
  void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& stream) const override;
  void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& stream) const override;

  void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                const SgdConfig& config, Stream& stream) const override;
  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWConfig& config, int64_t step, Stream& stream) const override;
};

}  // namespace ls
