// Layer normalisation on CUDA: the CUDA kernels of ops/layernorm.h.
// The forward and the input gradient run one block per row (grid-stride over rows): block sums
// with a fixed shape (warp butterflies, then warps in order), so results repeat bitwise.
// dgamma/dbeta are two-pass tiled column sums (ops/cuda/column_sums.cuh; no atomics): column c
// adds, within each tile of 256 rows, the rows lane, lane + 8, ... in order for each of 8 lanes,
// then the lane sums in lane order, then the tiles in tile order (the host adds rows in order:
// equal to rounding). They run before the input gradient, so dx may be dy. y may be x: a row is
// read whole before it is written, each element by the thread that writes it.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/layernorm.h"

namespace ls::cuda_ops {
namespace {

__global__ void layernorm_kernel(const float* x, const float* gamma, const float* beta,
                                 int64_t rows, int64_t cols, float eps, float* y, float* mean,
                                 float* rstd) {
  __shared__ float shared[kWarp];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
    const float m = block_sum(sum, shared) * inv_cols;
    float squares = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = xr[c] - m;
      squares += d * d;
    }
    const float s = 1.0f / sqrtf(block_sum(squares, shared) * inv_cols + eps);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      yr[c] = (xr[c] - m) * s * gamma[c] + beta[c];
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = s;
    }
  }
}

// Pass 1 over row tile blockIdx.y: partials[tile, c] = sum dy * xhat and, row_tiles rows
// further on, partials[row_tiles + tile, c] = sum dy (see column_sums.cuh).
__global__ void layernorm_param_grad_kernel(const float* x, const float* mean, const float* rstd,
                                            const float* dy, int64_t rows, int64_t cols,
                                            int64_t rows_per_tile, float* partials) {
  __shared__ float shared[kColumnTileLanes][kColumnTileCols];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTileCols + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_tile;
  const int64_t end = begin + rows_per_tile < rows ? begin + rows_per_tile : rows;
  float acc_gamma = 0.0f, acc_beta = 0.0f;
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kColumnTileLanes) {
      const float g = dy[r * cols + c];
      acc_gamma += g * ((x[r * cols + c] - mean[r]) * rstd[r]);
      acc_beta += g;
    }
  }
  acc_gamma = combine_lanes(acc_gamma, shared);  // every thread: barriers inside
  acc_beta = combine_lanes(acc_beta, shared);
  if (threadIdx.y == 0 && c < cols) {
    partials[static_cast<int64_t>(blockIdx.y) * cols + c] = acc_gamma;
    partials[(static_cast<int64_t>(gridDim.y) + blockIdx.y) * cols + c] = acc_beta;
  }
}

// Pass 2: dgamma[c] += the tiles' sums of column c in tile order; dbeta[c] likewise.
__global__ void layernorm_param_grad_finish_kernel(const float* partials, int64_t row_tiles,
                                                   int64_t cols, float* dgamma, float* dbeta) {
  LS_GRID_STRIDE_LOOP(c, cols) {
    float sum_gamma = 0.0f, sum_beta = 0.0f;
    for (int64_t t = 0; t < row_tiles; ++t) {
      sum_gamma += partials[t * cols + c];
      sum_beta += partials[(row_tiles + t) * cols + c];
    }
    dgamma[c] += sum_gamma;
    dbeta[c] += sum_beta;
  }
}

// dx (+)= rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; one block per row.
__global__ void layernorm_input_grad_kernel(const float* x, const float* gamma, const float* mean,
                                            const float* rstd, const float* dy, int64_t rows,
                                            int64_t cols, float* dx, bool accumulate) {
  __shared__ float shared[kWarp];
  const float inv_cols = 1.0f / static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    const float m = mean[r], s = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = dyr[c] * gamma[c];
      sum_g += g;
      sum_gx += g * ((xr[c] - m) * s);
    }
    const float mean_g = block_sum(sum_g, shared) * inv_cols;
    const float mean_gx = block_sum(sum_gx, shared) * inv_cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xhat = (xr[c] - m) * s;
      const float v = s * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
      dxr[c] = accumulate ? dxr[c] + v : v;
    }
    __syncthreads();  // `shared` is rewritten by the next row's sums
  }
}

unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(std::min<int64_t>(rows, kMaxBlocks));
}

}  // namespace

void layernorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols,
               float eps, float* y, float* mean, float* rstd, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (rows * cols == 0) return;
  LS_LAUNCH(layernorm_kernel, row_blocks(rows), kThreads, 0, stream, x, gamma, beta, rows, cols,
            eps, y, mean, rstd);
  LS_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, int64_t rows, int64_t cols, float* dx, bool accumulate,
                        float* dgamma, float* dbeta, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (rows * cols == 0) return;
  // First, in stream order: it reads dy, which dx may be.
  const ColumnTiles tiles = column_tiles(rows, cols);
  const CudaScratch partials(launch.device(), 2 * sizeof(float) * tiles.row_tiles * cols);
  LS_LAUNCH(layernorm_param_grad_kernel, tiles.grid(), ColumnTiles::block(), 0, stream, x, mean,
            rstd, dy, rows, cols, tiles.rows_per_tile, partials.f32());
  LS_CUDA_CHECK_LAUNCH();
  LS_LAUNCH(layernorm_param_grad_finish_kernel, grid_for(cols), kThreads, 0, stream,
            partials.f32(), static_cast<int64_t>(tiles.row_tiles), cols, dgamma, dbeta);
  LS_CUDA_CHECK_LAUNCH();
  LS_LAUNCH(layernorm_input_grad_kernel, row_blocks(rows), kThreads, 0, stream, x, gamma, mean,
            rstd, dy, rows, cols, dx, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

const LayerNormOps kCudaLayerNorm{
    .layernorm = layernorm,
    .layernorm_backward = layernorm_backward,
};
LS_REGISTER_OP_TABLE(LayerNormOps, DeviceKind::kCuda, kCudaLayerNorm);

}  // namespace ls::cuda_ops
