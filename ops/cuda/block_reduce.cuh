// Warp and block reductions shared by the ops/cuda/*.cu kernels (nvcc only). block_max /
// block_sum: blockDim.x is a multiple of 32 and at most 1024 and every thread of the block calls
// them; every thread gets the result. Warps reduce by butterfly (an order fixed by the lane
// numbers), then the warp results are combined in warp order, so results are bitwise repeatable.
// `shared` holds 32 floats. A barrier starts each call (a previous call's reads of `shared` are
// done) and one ends the block-wide part (every thread's work before the call is done), so calls
// may follow each other and the caller may then overwrite what it read before the call.
#pragma once

#include <cuda_runtime.h>

namespace ls::cuda_ops {

inline constexpr int kWarp = 32;

__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float block_max(float v, float* shared) {
  v = warp_max(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (threadIdx.x % kWarp == 0) shared[threadIdx.x / kWarp] = v;
  __syncthreads();
  float result = shared[0];
  for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) result = fmaxf(result, shared[w]);
  return result;
}

// The block's `partial`s summed in double by a halving tree over the thread numbers (an order
// fixed by the thread numbers: repeatable); blockDim.x is a power of two and `shared` holds
// blockDim.x doubles. Every thread gets the total; barriers as block_sum's.
__device__ inline double block_sum_tree(double partial, double* shared) {
  const int tid = static_cast<int>(threadIdx.x);
  __syncthreads();  // `shared` may still be read from a previous call
  shared[tid] = partial;
  __syncthreads();
  for (int stride = static_cast<int>(blockDim.x) / 2; stride > 0; stride /= 2) {
    if (tid < stride) shared[tid] += shared[tid + stride];
    __syncthreads();
  }
  return shared[0];
}

__device__ inline float block_sum(float v, float* shared) {
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read from a previous call
  if (threadIdx.x % kWarp == 0) shared[threadIdx.x / kWarp] = v;
  __syncthreads();
  float result = shared[0];
  for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) result += shared[w];
  return result;
}

}  // namespace ls::cuda_ops
