// Deterministic column sums over many rows, in two passes (ops/cuda/bias.cu bias_grad,
// ops/cuda/layernorm.cu dgamma/dbeta). One thread per column over every row leaves the GPU idle
// (3 blocks for 768 columns); here the rows are cut into tiles so that [16384, 768] is 1,536
// blocks. Pass 1: block (x, y), kColumnTileCols x kColumnTileLanes threads, sums columns
// 32x .. 32x + 31 over row tile y: thread (c, lane) adds the tile's rows lane, lane + 8, ... in
// increasing order, then combine_lanes adds the 8 lane sums in lane order; the tile's sums go to
// a partials buffer [row_tiles, cols]. Pass 2: one thread per column adds the tiles' partials in
// tile order. The tiling depends on the shape only, so every run adds in the same order: bitwise
// repeatable, no atomics. The partials come from the device's caching allocator (CudaScratch).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace ls::cuda_ops {

inline constexpr int kColumnTileCols = 32;
inline constexpr int kColumnTileLanes = 8;
inline constexpr int64_t kRowsPerTile = 256;
inline constexpr int64_t kMaxRowTiles = 65535;  // gridDim.y

struct ColumnTiles {
  int64_t rows_per_tile;
  unsigned int row_tiles;
  unsigned int col_tiles;
  dim3 grid() const { return dim3(col_tiles, row_tiles); }
  static dim3 block() { return dim3(kColumnTileCols, kColumnTileLanes); }
};

// kRowsPerTile rows a tile; more (a multiple of the lanes) when that would be over 65,535 tiles.
inline ColumnTiles column_tiles(int64_t rows, int64_t cols) {
  int64_t per_tile = kRowsPerTile;
  if ((rows + per_tile - 1) / per_tile > kMaxRowTiles) {
    per_tile = (rows + kMaxRowTiles - 1) / kMaxRowTiles;
    per_tile = (per_tile + kColumnTileLanes - 1) / kColumnTileLanes * kColumnTileLanes;
  }
  const int64_t row_tiles = std::max<int64_t>(1, (rows + per_tile - 1) / per_tile);
  return {per_tile, static_cast<unsigned int>(row_tiles),
          static_cast<unsigned int>((cols + kColumnTileCols - 1) / kColumnTileCols)};
}

// The sum of the kColumnTileLanes lane values of this thread's column, in lane order, valid in
// lane 0 (threadIdx.y == 0). Every thread of the block calls it; it may be called again at once.
__device__ inline float combine_lanes(float value, float (*shared)[kColumnTileCols]) {
  shared[threadIdx.y][threadIdx.x] = value;
  __syncthreads();
  float sum = 0.0f;
  if (threadIdx.y == 0) {
    for (int lane = 0; lane < kColumnTileLanes; ++lane) sum += shared[lane][threadIdx.x];
  }
  __syncthreads();  // `shared` is free again
  return sum;
}

}  // namespace ls::cuda_ops
