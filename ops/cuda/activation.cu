// CUDA kernels of ops/activation.h: relu, gelu (tanh form), gelu_erf and tanh, forward and
// backward. Asynchronous on the stream; n == 0 launches nothing; grid-stride loops over int64
// indices. In place is allowed: every element is read and written by the same thread.
#include <cuda_runtime.h>

#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/cuda_launch.h"

namespace ls::cuda_ops {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n,
                                     bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = x[i] > 0.0f ? dy[i] : 0.0f;
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

// gelu (tanh form) and its derivative d/dx [0.5 x (1 + tanh u)], u = c (x + a x^3):
//   0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 a x^2)
// and the erf form, d/dx [x Phi(x)] = Phi(x) + x phi(x), Phi(x) = 0.5 (1 + erf(x / sqrt 2)).
// One definition each, so the fused bias_gelu kernels compute the bits of the unfused ones.
__device__ inline float gelu_value(float v) {
  const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
  return 0.5f * v * (1.0f + t);
}

__device__ inline float gelu_grad(float v) {
  const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
  const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__device__ inline float gelu_erf_value(float v) { return 0.5f * v * (1.0f + erff(v * kInvSqrt2)); }

__device__ inline float gelu_erf_grad(float v) {
  return 0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v);
}

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = gelu_value(x[i]); }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n,
                                     bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = dy[i] * gelu_grad(x[i]);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

__global__ void gelu_erf_kernel(const float* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = gelu_erf_value(x[i]); }
}

__global__ void gelu_erf_backward_kernel(const float* x, const float* dy, float* dx, int64_t n,
                                         bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = dy[i] * gelu_erf_grad(x[i]);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

// Element i of [rows, cols]: column i % cols.
// y16 (may be null): y rounded to bf16 as well.
__global__ void bias_gelu_kernel(const float* x, const float* bias, float* y, int64_t n,
                                 int64_t cols, bool erf, uint16_t* y16) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float u = x[i] + bias[i % cols];
    const float v = erf ? gelu_erf_value(u) : gelu_value(u);
    y[i] = v;
    if (y16 != nullptr) y16[i] = f32_to_bf16_bits(v);
  }
}

__global__ void bias_gelu_backward_kernel(const float* x, const float* bias, const float* dy,
                                          float* dx, int64_t n, int64_t cols, bool erf) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float u = x[i] + bias[i % cols];
    dx[i] = dy[i] * (erf ? gelu_erf_grad(u) : gelu_grad(u));
  }
}

__global__ void tanh_kernel(const float* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = tanhf(x[i]); }
}

__global__ void tanh_backward_kernel(const float* y, const float* dy, float* dx, int64_t n,
                                     bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = dy[i] * (1.0f - y[i] * y[i]);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

}  // namespace

void relu(const float* x, float* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(relu_kernel, grid_for(n), kThreads, 0, stream, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(relu_backward_kernel, grid_for(n), kThreads, 0, stream, x, dy, dx, n, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void gelu(const float* x, float* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(gelu_kernel, grid_for(n), kThreads, 0, stream, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(gelu_backward_kernel, grid_for(n), kThreads, 0, stream, x, dy, dx, n, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void gelu_erf(const float* x, float* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(gelu_erf_kernel, grid_for(n), kThreads, 0, stream, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                       Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(gelu_erf_backward_kernel, grid_for(n), kThreads, 0, stream, x, dy, dx, n, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void tanh_op(const float* x, float* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(tanh_kernel, grid_for(n), kThreads, 0, stream, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(tanh_backward_kernel, grid_for(n), kThreads, 0, stream, y, dy, dx, n, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void bias_gelu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols, bool erf,
               uint16_t* y16, Stream& on) {
  const CudaLaunch launch(on);
  const int64_t n = rows * cols;
  if (n == 0) return;
  LS_LAUNCH(bias_gelu_kernel, grid_for(n), kThreads, 0, launch.stream(), x, bias, y, n, cols, erf,
            y16);
  LS_CUDA_CHECK_LAUNCH();
}

// dx in one kernel, then bias_grad's deterministic column sums of it (ops/cuda/bias.cu): on a GPU
// the second read of dx is cheap, and the sums keep bias_grad's order and bits.
void bias_gelu_backward(const float* x, const float* bias, const float* dy, float* dx, float* dbias,
                        int64_t rows, int64_t cols, bool erf, bool accumulate_dbias, Stream& on) {
  const int64_t n = rows * cols;
  if (n > 0) {
    const CudaLaunch launch(on);
    LS_LAUNCH(bias_gelu_backward_kernel, grid_for(n), kThreads, 0, launch.stream(), x, bias, dy, dx,
              n, cols, erf);
    LS_CUDA_CHECK_LAUNCH();
  }
  // Its two launches are in bias_gelu_backward's own description (ops/activation.h): a ledger
  // records nothing more here.
  op_entry(&BiasOps::bias_grad, "bias_gelu_backward", on, [] { return OpLaunches{}; })(
      dx, dbias, rows, cols, accumulate_dbias, on);
}

const ActivationOps kCudaActivation{
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
LS_REGISTER_OP_TABLE(ActivationOps, DeviceKind::kCuda, kCudaActivation);

}  // namespace ls::cuda_ops
