// Layer normalisation on CUDA: the CUDA kernels of ops/layernorm.h.
// Note [LayerNorm a warp per row]: the forward and the input gradient give each row one warp (8
// rows a block, grid-stride over rows): its sums are warp butterflies (fixed order, so results
// repeat bitwise) with no block barrier, and the warp reads the row 16 bytes a lane at a time
// when the row length is a multiple of 4 and every row pointer is 16-byte aligned (float4), else
// a float at a time. A row of GPT-2's 768 floats is 6 float4 a lane; its second and third reads
// come from L1. (Run 6 measured the earlier block-per-row kernels, 256 threads and three block
// barriers per 768-float row, at 24-29% of the H200's copy bandwidth.)
// dgamma/dbeta are two-pass tiled column sums (ops/cuda/column_sums.cuh; no atomics): column c
// adds, within each tile of 256 rows, the rows lane, lane + 8, ... in order for each of 8 lanes,
// then the lane sums in lane order, then the tiles in tile order (the host adds rows in order:
// equal to rounding). They run before the input gradient, so dx may be dy. y may be x: a row is
// read whole before it is written, each element by the thread that writes it.
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/column_sums.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/layernorm.h"

namespace ls::cuda_ops {
namespace {

constexpr int kRowsPerBlock = kThreads / kWarp;

// kVec consecutive floats of a row: one float4 load or store when kVec is 4.
template <int kVec>
struct Chunk {
  float v[kVec];
};
template <int kVec>
__device__ inline Chunk<kVec> load_chunk(const float* row, int64_t i) {
  Chunk<kVec> c;
  if constexpr (kVec == 4) {
    const float4 f = reinterpret_cast<const float4*>(row)[i];
    c.v[0] = f.x;
    c.v[1] = f.y;
    c.v[2] = f.z;
    c.v[3] = f.w;
  } else {
    c.v[0] = row[i];
  }
  return c;
}
template <int kVec>
__device__ inline void store_chunk(float* row, int64_t i, const Chunk<kVec>& c) {
  if constexpr (kVec == 4) {
    reinterpret_cast<float4*>(row)[i] = make_float4(c.v[0], c.v[1], c.v[2], c.v[3]);
  } else {
    row[i] = c.v[0];
  }
}

// This thread's warp's first row, and the step between a warp's rows (see the Note).
__device__ inline int64_t first_row() {
  return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
}
__device__ inline int64_t row_step() { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }

// y16 (may be null): y rounded to bf16 as well; y may be null when y16 is not (bf16 only).
// residual (may be null; add_layernorm): the row normalised is x + residual, which the first pass
// writes to sum_out; the later passes read it back, each lane the chunks it wrote itself.
template <int kVec>
__global__ void layernorm_kernel(const float* x, const float* residual, float* sum_out,
                                 const float* gamma, const float* beta, int64_t rows, int64_t cols,
                                 float eps, float* y, float* mean, float* rstd, uint16_t* y16) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int64_t chunks = cols / kVec;
  for (int64_t r = first_row(); r < rows; r += row_step()) {  // uniform over the warp
    const float* xr = x + r * cols;
    float* yr = y == nullptr ? nullptr : y + r * cols;
    float sum = 0.0f;
    for (int64_t i = lane; i < chunks; i += kWarp) {
      Chunk<kVec> c = load_chunk<kVec>(xr, i);
      if (residual != nullptr) {
        const Chunk<kVec> add = load_chunk<kVec>(residual + r * cols, i);
        for (int j = 0; j < kVec; ++j) c.v[j] += add.v[j];
        store_chunk<kVec>(sum_out + r * cols, i, c);
      }
      for (float v : c.v) sum += v;
    }
    if (residual != nullptr) xr = sum_out + r * cols;
    const float m = warp_sum(sum) * inv_cols;
    float squares = 0.0f;
    for (int64_t i = lane; i < chunks; i += kWarp) {
      const Chunk<kVec> c = load_chunk<kVec>(xr, i);
      for (float v : c.v) squares += (v - m) * (v - m);
    }
    const float s = 1.0f / sqrtf(warp_sum(squares) * inv_cols + eps);
    for (int64_t i = lane; i < chunks; i += kWarp) {
      Chunk<kVec> c = load_chunk<kVec>(xr, i);
      const Chunk<kVec> g = load_chunk<kVec>(gamma, i), b = load_chunk<kVec>(beta, i);
      for (int j = 0; j < kVec; ++j) c.v[j] = (c.v[j] - m) * s * g.v[j] + b.v[j];
      if (yr != nullptr) store_chunk<kVec>(yr, i, c);
      if (y16 != nullptr) {
        for (int j = 0; j < kVec; ++j) y16[r * cols + i * kVec + j] = f32_to_bf16_bits(c.v[j]);
      }
    }
    if (lane == 0) {
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

// dx (+)= rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; one warp per row (see
// Note [LayerNorm a warp per row]).
template <int kVec>
__global__ void layernorm_input_grad_kernel(const float* x, const float* gamma, const float* mean,
                                            const float* rstd, const float* dy, int64_t rows,
                                            int64_t cols, float* dx, bool accumulate) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int64_t chunks = cols / kVec;
  for (int64_t r = first_row(); r < rows; r += row_step()) {  // uniform over the warp
    const float* xr = x + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    const float m = mean[r], s = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t i = lane; i < chunks; i += kWarp) {
      const Chunk<kVec> xc = load_chunk<kVec>(xr, i), dc = load_chunk<kVec>(dyr, i);
      const Chunk<kVec> gc = load_chunk<kVec>(gamma, i);
      for (int j = 0; j < kVec; ++j) {
        const float g = dc.v[j] * gc.v[j];
        sum_g += g;
        sum_gx += g * ((xc.v[j] - m) * s);
      }
    }
    const float mean_g = warp_sum(sum_g) * inv_cols;
    const float mean_gx = warp_sum(sum_gx) * inv_cols;
    for (int64_t i = lane; i < chunks; i += kWarp) {
      const Chunk<kVec> xc = load_chunk<kVec>(xr, i), dc = load_chunk<kVec>(dyr, i);
      const Chunk<kVec> gc = load_chunk<kVec>(gamma, i);
      Chunk<kVec> out = accumulate ? load_chunk<kVec>(dxr, i) : Chunk<kVec>{};
      for (int j = 0; j < kVec; ++j) {
        const float xhat = (xc.v[j] - m) * s;
        const float v = s * (dc.v[j] * gc.v[j] - mean_g - xhat * mean_gx);
        out.v[j] = accumulate ? out.v[j] + v : v;
      }
      store_chunk<kVec>(dxr, i, out);
    }
  }
}

unsigned int row_blocks(int64_t rows) {
  return static_cast<unsigned int>(
      std::min<int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, kMaxBlocks));
}

// Whether rows of `cols` floats from every one of `pointers` start 16-byte aligned (float4).
bool rows_take_float4(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % 4 != 0) return false;
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace

// layernorm of x, or (residual not null) of x + residual, written to sum_out.
void layernorm_rows(const float* x, const float* residual, float* sum_out, const float* gamma,
                    const float* beta, int64_t rows, int64_t cols, float eps, float* y, float* mean,
                    float* rstd, uint16_t* y16, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (rows * cols == 0) return;
  if (rows_take_float4(cols, {x, residual, sum_out, gamma, beta, y})) {
    LS_LAUNCH(layernorm_kernel<4>, row_blocks(rows), kThreads, 0, stream, x, residual, sum_out,
              gamma, beta, rows, cols, eps, y, mean, rstd, y16);
  } else {
    LS_LAUNCH(layernorm_kernel<1>, row_blocks(rows), kThreads, 0, stream, x, residual, sum_out,
              gamma, beta, rows, cols, eps, y, mean, rstd, y16);
  }
  LS_CUDA_CHECK_LAUNCH();
}

void layernorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols,
               float eps, float* y, float* mean, float* rstd, uint16_t* y16, Stream& on) {
  layernorm_rows(x, nullptr, nullptr, gamma, beta, rows, cols, eps, y, mean, rstd, y16, on);
}

void add_layernorm(const float* a, const float* b, float* sum, const float* gamma,
                   const float* beta, int64_t rows, int64_t cols, float eps, float* y, float* mean,
                   float* rstd, uint16_t* y16, Stream& on) {
  layernorm_rows(a, b, sum, gamma, beta, rows, cols, eps, y, mean, rstd, y16, on);
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
  if (rows_take_float4(cols, {x, gamma, dy, dx})) {
    LS_LAUNCH(layernorm_input_grad_kernel<4>, row_blocks(rows), kThreads, 0, stream, x, gamma,
              mean, rstd, dy, rows, cols, dx, accumulate);
  } else {
    LS_LAUNCH(layernorm_input_grad_kernel<1>, row_blocks(rows), kThreads, 0, stream, x, gamma,
              mean, rstd, dy, rows, cols, dx, accumulate);
  }
  LS_CUDA_CHECK_LAUNCH();
}

const LayerNormOps kCudaLayerNorm{
    .layernorm = layernorm,
    .add_layernorm = add_layernorm,
    .layernorm_backward = layernorm_backward,
};
LS_REGISTER_OP_TABLE(LayerNormOps, DeviceKind::kCuda, kCudaLayerNorm);

}  // namespace ls::cuda_ops
