// CUDA kernels of ops/bias.h. Asynchronous on the stream; rows * cols == 0 launches nothing
// (bias_grad with 0 rows still writes its zero sums).
// bias_grad is deterministic: a two-pass tiled column sum (ops/cuda/column_sums.cuh). Column c
// adds, within each tile of 256 rows, the rows lane, lane + 8, ... in order for each of 8 lanes,
// then the 8 lane sums in lane order, then the tiles' sums in tile order. The host kernel adds the
// rows in row order, so the two agree to rounding, and every CUDA run is bitwise the same.
#include <cuda_runtime.h>

#include "ops/bias.h"
#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_launch.h"

namespace ls::cuda_ops {
namespace {

__global__ void bias_add_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  LS_GRID_STRIDE_LOOP(i, rows * cols) { y[i] += bias[i % cols]; }
}

// Pass 1: partials[tile, c] = the sum of dy[r, c] over the rows of tile blockIdx.y; dy is f32
// (dy32) or bf16 (dy16, widened exactly), the other null.
__global__ void bias_grad_tile_kernel(const float* dy32, const uint16_t* dy16, int64_t rows,
                                      int64_t cols, int64_t rows_per_tile, float* partials) {
  __shared__ float shared[kColumnTileLanes][kColumnTileCols];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnTileCols + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_tile;
  const int64_t end = begin + rows_per_tile < rows ? begin + rows_per_tile : rows;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kColumnTileLanes) {
      sum += dy16 != nullptr ? bf16_bits_to_f32(dy16[r * cols + c]) : dy32[r * cols + c];
    }
  }
  sum = combine_lanes(sum, shared);  // every thread: a barrier inside
  if (threadIdx.y == 0 && c < cols) partials[static_cast<int64_t>(blockIdx.y) * cols + c] = sum;
}

// Pass 2: dbias[c] (+)= the tiles' partials of column c, in tile order.
__global__ void bias_grad_finish_kernel(const float* partials, int64_t row_tiles, int64_t cols,
                                        float* dbias, bool accumulate) {
  LS_GRID_STRIDE_LOOP(c, cols) {
    float sum = 0.0f;
    for (int64_t t = 0; t < row_tiles; ++t) sum += partials[t * cols + c];
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

// dy is f32 (dy32) or bf16 (dy16), the other null.
void column_sums(const float* dy32, const uint16_t* dy16, float* dbias, int64_t rows, int64_t cols,
                 bool accumulate, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (cols == 0) return;
  const ColumnTiles tiles = column_tiles(rows, cols);
  const CudaScratch partials(launch.device(), sizeof(float) * tiles.row_tiles * cols);
  LS_LAUNCH(bias_grad_tile_kernel, tiles.grid(), ColumnTiles::block(), 0, stream, dy32, dy16, rows,
            cols, tiles.rows_per_tile, partials.f32());
  LS_CUDA_CHECK_LAUNCH();
  LS_LAUNCH(bias_grad_finish_kernel, grid_for(cols), kThreads, 0, stream, partials.f32(),
            static_cast<int64_t>(tiles.row_tiles), cols, dbias, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
               Stream& on) {
  column_sums(dy, nullptr, dbias, rows, cols, accumulate, on);
}

void bias_grad_bf16(const uint16_t* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
                    Stream& on) {
  column_sums(nullptr, dy, dbias, rows, cols, accumulate, on);
}

const BiasOps kCudaBias{
    .bias_add = bias_add,
    .bias_grad = bias_grad,
    .bias_grad_bf16 = bias_grad_bf16,
};
LS_REGISTER_OP_TABLE(BiasOps, DeviceKind::kCuda, kCudaBias);

}  // namespace ls::cuda_ops
