// Elementwise CUDA kernels: bias add and its gradient, ReLU and GELU with their backward passes,
// fill / scale / axpy / add, and f32 <-> bf16 casts. Semantics as in ops/kernels.h.
// All launchers are asynchronous on `stream`, accept n == 0 (nothing is launched) and use
// grid-stride loops over int64 indices. In-place use is allowed where ops/kernels.h allows it
// (every element is read and written by the same thread). bias_grad is deterministic: one
// thread per column sums the rows in order.
#include <cuda_runtime.h>

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_launch.h"

namespace ls::cuda_ops {
namespace {

__global__ void bias_add_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  LS_GRID_STRIDE_LOOP(i, rows * cols) { y[i] += bias[i % cols]; }
}

// One thread per column, rows summed in order: the same result on every run.
__global__ void bias_grad_kernel(const float* dy, float* dbias, int64_t rows, int64_t cols,
                                 bool accumulate) {
  LS_GRID_STRIDE_LOOP(c, cols) {
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
    dbias[c] = accumulate ? dbias[c] + sum : sum;
  }
}

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

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

// d/dx [0.5 x (1 + tanh u)], u = c (x + a x^3):
//   0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 a x^2)
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n,
                                     bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    const float g = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    dx[i] = accumulate ? dx[i] + g : g;
  }
}

// Counts per block in shared memory, then one atomicAdd per block: integer sums are the same in
// any order, so the result is exact and deterministic.
__global__ void count_nonfinite_kernel(const float* x, int64_t n, int32_t* count) {
  __shared__ int32_t block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  int32_t local = 0;
  LS_GRID_STRIDE_LOOP(i, n) { local += !isfinite(x[i]); }
  if (local != 0) atomicAdd(&block_count, local);
  __syncthreads();
  if (threadIdx.x == 0 && block_count != 0) atomicAdd(count, block_count);
}

__global__ void fill_kernel(float* x, int64_t n, float value) {
  LS_GRID_STRIDE_LOOP(i, n) { x[i] = value; }
}

__global__ void scale_kernel(float* x, int64_t n, float alpha) {
  LS_GRID_STRIDE_LOOP(i, n) { x[i] *= alpha; }
}

__global__ void axpy_kernel(float alpha, const float* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] += alpha * x[i]; }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { out[i] = a[i] + b[i]; }
}

// Bit for bit the conversion of ls::f32_to_bf16 (engine/core/dtype.h): round to nearest even, NaN
// stays a quiet NaN with its sign and top payload bits.
__device__ uint16_t f32_to_bf16_bits(float x) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__global__ void cast_f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = f32_to_bf16_bits(x[i]); }
}

__global__ void cast_bf16_to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16); }
}

}  // namespace

void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  bias_add_kernel<<<grid_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  LS_CUDA_CHECK_LAUNCH();
}

void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
               cudaStream_t stream) {
  if (cols == 0) return;
  bias_grad_kernel<<<grid_for(cols), kThreads, 0, stream>>>(dy, dbias, rows, cols, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, dx, n, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, dy, dx, n, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void count_nonfinite(const float* x, int64_t n, int32_t* count, cudaStream_t stream) {
  LS_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int32_t), stream));
  if (n == 0) return;
  count_nonfinite_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, count);
  LS_CUDA_CHECK_LAUNCH();
}

void fill(float* x, int64_t n, float value, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, value);
  LS_CUDA_CHECK_LAUNCH();
}

void scale(float* x, int64_t n, float alpha, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, alpha);
  LS_CUDA_CHECK_LAUNCH();
}

void axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, stream>>>(alpha, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, out, n);
  LS_CUDA_CHECK_LAUNCH();
}

void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_f32_to_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  cast_bf16_to_f32_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

}  // namespace ls::cuda_ops
