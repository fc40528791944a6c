// CUDA kernels of ops/bias.h. Asynchronous on the stream; rows * cols == 0 launches nothing.
// bias_grad is deterministic: one thread per column sums the rows in order.
#include <cuda_runtime.h>

#include "ops/bias.h"
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

}  // namespace

void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (rows * cols == 0) return;
  LS_LAUNCH(bias_add_kernel, grid_for(rows * cols), kThreads, 0, stream, y, bias, rows, cols);
  LS_CUDA_CHECK_LAUNCH();
}

void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
               Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (cols == 0) return;
  LS_LAUNCH(bias_grad_kernel, grid_for(cols), kThreads, 0, stream, dy, dbias, rows, cols,
            accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

const BiasOps kCudaBias{
    .bias_add = bias_add,
    .bias_grad = bias_grad,
};
LS_REGISTER_OP_TABLE(BiasOps, DeviceKind::kCuda, kCudaBias);

}  // namespace ls::cuda_ops
