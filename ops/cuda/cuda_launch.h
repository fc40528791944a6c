// Launch helpers shared by the ops/cuda/*.cu files (nvcc only): the block size, a grid size
// for grid-stride loops, the grid-stride loop itself, and the post-launch check.
// Every launch is followed by LS_CUDA_CHECK_LAUNCH(), which reports bad configurations at the
// call site (asynchronous faults surface at the next synchronize or check of the stream).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "engine/core/cuda/cuda_check.h"

namespace ls::cuda_ops {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops cover the rest.
constexpr int64_t kMaxBlocks = 65535;

inline unsigned int grid_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

}  // namespace ls::cuda_ops

// for (int64_t i = global thread index; i < n; i += total threads)
#define LS_GRID_STRIDE_LOOP(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

#define LS_CUDA_CHECK_LAUNCH() LS_CUDA_CHECK(cudaGetLastError())
