// CudaKernels: the Kernels table of CUDA devices. Each method makes the stream's device current
// for the call (DeviceGuard), takes the raw cudaStream_t (an error for a non-CUDA or aborted
// stream) and calls the launcher of ops/cuda/*.cu. Asynchronous; see ops/kernels.h.
// Thread-safety: stateless; cuBLAS handles are per thread (gemm.cu).
#include "ops/cuda/cuda_kernels.h"

#include "engine/core/cuda/cuda_runtime.h"
#include "engine/core/cuda/cuda_stream_access.h"
#include "engine/core/error.h"

namespace ls {
namespace {

// The stream's device is current while a Launch lives.
class Launch {
 public:
  explicit Launch(Stream& stream)
      : device_(checked_index(stream)), guard_(device_), stream_(cuda_stream_of(stream)) {}
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

 private:
  static int checked_index(Stream& stream) {
    LS_CHECK(stream.device().is_cuda(), "a CUDA kernel was given a stream of ",
             stream.device().str(), "; use kernels_for(stream.device())");
    return stream.device().index;
  }

  int device_;
  DeviceGuard guard_;
  cudaStream_t stream_;
};

}  // namespace

void CudaKernels::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                       float* c, int64_t ldc, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, launch.device(),
                 launch.stream());
}

void CudaKernels::bias_add(float* y, const float* bias, int64_t rows, int64_t cols,
                           Stream& stream) const {
  Launch launch(stream);
  cuda_ops::bias_add(y, bias, rows, cols, launch.stream());
}

void CudaKernels::bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols,
                            bool accumulate, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::bias_grad(dy, dbias, rows, cols, accumulate, launch.stream());
}

void CudaKernels::relu(const float* x, float* y, int64_t n, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::relu(x, y, n, launch.stream());
}

void CudaKernels::relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                bool accumulate, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::relu_backward(x, dy, dx, n, accumulate, launch.stream());
}

void CudaKernels::gelu(const float* x, float* y, int64_t n, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::gelu(x, y, n, launch.stream());
}

void CudaKernels::gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                bool accumulate, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::gelu_backward(x, dy, dx, n, accumulate, launch.stream());
}

void CudaKernels::softmax_xent(const float* logits, const int32_t* labels, int64_t rows,
                               int64_t cols, float grad_scale, float* loss, float* dlogits,
                               Stream& stream) const {
  Launch launch(stream);
  cuda_ops::softmax_xent(logits, labels, rows, cols, grad_scale, loss, dlogits, launch.stream());
}

void CudaKernels::count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                int64_t cols, int32_t* correct, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::count_correct(logits, labels, rows, cols, correct, launch.stream());
}

void CudaKernels::count_nonfinite(const float* x, int64_t n, int32_t* count,
                                  Stream& stream) const {
  Launch launch(stream);
  cuda_ops::count_nonfinite(x, n, count, launch.stream());
}

void CudaKernels::fill(float* x, int64_t n, float value, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::fill(x, n, value, launch.stream());
}

void CudaKernels::scale(float* x, int64_t n, float alpha, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::scale(x, n, alpha, launch.stream());
}

void CudaKernels::axpy(float alpha, const float* x, float* y, int64_t n, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::axpy(alpha, x, y, n, launch.stream());
}

void CudaKernels::add(const float* a, const float* b, float* out, int64_t n, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::add(a, b, out, n, launch.stream());
}

void CudaKernels::cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::cast_f32_to_bf16(x, y, n, launch.stream());
}

void CudaKernels::cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::cast_bf16_to_f32(x, y, n, launch.stream());
}

void CudaKernels::sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
                           const SgdConfig& config, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::sgd_step(param, grad, momentum_buf, n, config, launch.stream());
}

void CudaKernels::adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                             const AdamWConfig& config, int64_t step, Stream& stream) const {
  Launch launch(stream);
  cuda_ops::adamw_step(param, grad, m, v, n, config, step, launch.stream());
}

const Kernels& cuda_kernels() {
  static const CudaKernels kernels;
  return kernels;
}

}  // namespace ls
