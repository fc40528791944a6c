// CUDA kernels of ops/elementwise.h: fill, scale, axpy, add, the non-finite count and the
// f32 <-> bf16 casts. Asynchronous on the stream; n == 0 launches nothing (count_nonfinite still
// zeroes its count); grid-stride loops over int64 indices.
#include <algorithm>

#include <cuda_runtime.h>

#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/elementwise.h"

namespace ls::cuda_ops {
namespace {

// Counts per block in shared memory, then one atomicAdd per block: integer sums are the same in
// any order, so the result is exact and deterministic.
// The f32 count adds whole numbers, which f32 adds exactly (and so in any order) below 2^24.
template <typename Count>
__global__ void count_nonfinite_kernel(const float* x, int64_t n, Count* count) {
  __shared__ int32_t block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  int32_t local = 0;
  LS_GRID_STRIDE_LOOP(i, n) { local += !isfinite(x[i]); }
  if (local != 0) atomicAdd(&block_count, local);
  __syncthreads();
  if (threadIdx.x == 0 && block_count != 0) atomicAdd(count, static_cast<Count>(block_count));
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

__global__ void cast_f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = f32_to_bf16_bits(x[i]); }
}

__global__ void cast_bf16_to_f32_kernel(const uint16_t* x, float* y, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16); }
}

// One block per row at a time (a grid-stride loop over rows), its threads across the filled
// columns: no division per element.
__global__ void fill_columns_bf16_kernel(uint16_t* x, int64_t rows, int64_t cols, int64_t first,
                                         uint16_t value) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    uint16_t* row = x + r * cols;
    for (int64_t c = first + threadIdx.x; c < cols; c += blockDim.x) row[c] = value;
  }
}

}  // namespace

void fill(float* x, int64_t n, float value, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(fill_kernel, grid_for(n), kThreads, 0, stream, x, n, value);
  LS_CUDA_CHECK_LAUNCH();
}

void scale(float* x, int64_t n, float alpha, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(scale_kernel, grid_for(n), kThreads, 0, stream, x, n, alpha);
  LS_CUDA_CHECK_LAUNCH();
}

void axpy(float alpha, const float* x, float* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(axpy_kernel, grid_for(n), kThreads, 0, stream, alpha, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void add(const float* a, const float* b, float* out, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(add_kernel, grid_for(n), kThreads, 0, stream, a, b, out, n);
  LS_CUDA_CHECK_LAUNCH();
}

template <typename Count>
void count_nonfinite_as(const float* x, int64_t n, Count* count, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(Count), stream));  // 0 bits: 0 and 0.0f
  if (n == 0) return;
  LS_LAUNCH(count_nonfinite_kernel, grid_for(n), kThreads, 0, stream, x, n, count);
  LS_CUDA_CHECK_LAUNCH();
}

void count_nonfinite(const float* x, int64_t n, int32_t* count, Stream& on) {
  count_nonfinite_as(x, n, count, on);
}

void count_nonfinite_f32(const float* x, int64_t n, float* count, Stream& on) {
  count_nonfinite_as(x, n, count, on);
}

void cast_f32_to_bf16(const float* x, uint16_t* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(cast_f32_to_bf16_kernel, grid_for(n), kThreads, 0, stream, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void cast_bf16_to_f32(const uint16_t* x, float* y, int64_t n, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(cast_bf16_to_f32_kernel, grid_for(n), kThreads, 0, stream, x, y, n);
  LS_CUDA_CHECK_LAUNCH();
}

void fill_columns_bf16(uint16_t* x, int64_t rows, int64_t cols, int64_t first, uint16_t value,
                       Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (rows == 0 || first == cols) return;
  // A padded vocabulary fills under 128 columns a row: a block of 128 threads covers them.
  constexpr int kColumnThreads = 128;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, kMaxBlocks));
  LS_LAUNCH(fill_columns_bf16_kernel, blocks, kColumnThreads, 0, stream, x, rows, cols, first,
            value);
  LS_CUDA_CHECK_LAUNCH();
}

const ElementwiseOps kCudaElementwise{
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
LS_REGISTER_OP_TABLE(ElementwiseOps, DeviceKind::kCuda, kCudaElementwise);

}  // namespace ls::cuda_ops
