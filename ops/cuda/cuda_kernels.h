// The CUDA kernel table (CudaKernels, returned by cuda_kernels()) and the launchers behind it.
//
// Launchers (namespace ls::cuda_ops, one .cu file per op family) take raw device pointers and
// the cudaStream_t last; they enqueue asynchronously and check the launch. They expect the
// stream's device to be current: CudaKernels makes it so (DeviceGuard) before calling them.
// Semantics are those of ops/kernels.h; where the device cannot raise an error (a label outside
// [0, cols)), the result is NaN instead, as documented at each launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/kernels.h"

namespace ls {

namespace cuda_ops {

// gemm.cu (cuBLAS). `device` is the current device, whose handle and workspace are used.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int device,
          cudaStream_t stream);

// elementwise.cu
void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);
void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
               cudaStream_t stream);
void relu(const float* x, float* y, int64_t n, cudaStream_t stream);
void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream);
void gelu(const float* x, float* y, int64_t n, cudaStream_t stream);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream);
void count_nonfinite(const float* x, int64_t n, int32_t* count, cudaStream_t stream);
void fill(float* x, int64_t n, float value, cudaStream_t stream);
void scale(float* x, int64_t n, float alpha, cudaStream_t stream);
void axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);
void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t stream);

// softmax_xent.cu. A row whose label is outside [0, cols) gets a NaN loss (so *loss is NaN)
// and NaN dlogits; count_correct counts it as wrong.
void softmax_xent(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                  float grad_scale, float* loss, float* dlogits, cudaStream_t stream);
void count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                   int32_t* correct, cudaStream_t stream);

// optim.cu
void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
              const SgdConfig& config, cudaStream_t stream);
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWConfig& config, int64_t step, cudaStream_t stream);

}  // namespace cuda_ops

class CudaKernels final : public Kernels {
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
  void count_nonfinite(const float* x, int64_t n, int32_t* count, Stream& stream) const override;
  void fill(float* x, int64_t n, float value, Stream& stream) const override;
  void scale(float* x, int64_t n, float alpha, Stream& stream) const override;
  void axpy(float alpha, const float* x, float* y, int64_t n, Stream& stream) const override;
  void add(const float* a, const float* b, float* out, int64_t n, Stream& stream) const override;
  void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& stream) const override;
  void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& stream) const override;
  void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                const SgdConfig& config, Stream& stream) const override;
  void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWConfig& config, int64_t step, Stream& stream) const override;
};

}  // namespace ls
