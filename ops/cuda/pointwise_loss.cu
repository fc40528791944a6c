// Squared-error and BCE-with-logits losses on CUDA: the CUDA kernels of ops/pointwise_loss.h.
// The sum is deterministic without atomics: block b sums elements [b*kPointwiseLossBlock,
// (b+1)*kPointwiseLossBlock) in double (each thread a strided subset, then a tree over the
// threads, an order fixed by the thread numbers) into a scratch partial; one block then sums the
// partials the same way. Bitwise repeatable; not bitwise the host's (which sums each block in
// element order), close to it in double.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/pointwise_loss.h"

namespace ls::cuda_ops {
namespace {

__device__ inline double loss_of(PointwiseLoss kind, float p, float t) {
  if (kind == PointwiseLoss::kSquaredError) {
    const double d = static_cast<double>(p) - static_cast<double>(t);
    return d * d;
  }
  const double x = p;
  return fmax(x, 0.0) - x * static_cast<double>(t) + log1p(exp(-fabs(x)));
}

__device__ inline float derivative_of(PointwiseLoss kind, float p, float t) {
  if (kind == PointwiseLoss::kSquaredError) return 2.0f * (p - t);
  const float sigmoid = p >= 0.0f ? 1.0f / (1.0f + expf(-p)) : expf(p) / (1.0f + expf(p));
  return sigmoid - t;
}

__global__ void loss_block_sums_kernel(PointwiseLoss kind, const float* pred, const float* target,
                                       int64_t n, int64_t blocks, double* block_sums) {
  __shared__ double shared[kThreads];
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {  // uniform over the block
    const int64_t begin = b * kPointwiseLossBlock;
    const int64_t end = begin + kPointwiseLossBlock < n ? begin + kPointwiseLossBlock : n;
    double partial = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      partial += loss_of(kind, pred[i], target[i]);
    }
    const double total = block_sum_tree(partial, shared);  // starts with a barrier: reusable
    if (threadIdx.x == 0) block_sums[b] = total;
  }
}

__global__ void loss_total_kernel(const double* block_sums, int64_t blocks, float* sum) {
  __shared__ double shared[kThreads];
  double partial = 0.0;
  for (int64_t b = threadIdx.x; b < blocks; b += kThreads) partial += block_sums[b];
  const double total = block_sum_tree(partial, shared);
  if (threadIdx.x == 0) *sum = static_cast<float>(total);
}

__global__ void loss_backward_kernel(PointwiseLoss kind, const float* pred, const float* target,
                                     int64_t n, const float* seed, float* dpred,
                                     bool accumulate) {
  const float scale = *seed;
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = derivative_of(kind, pred[i], target[i]) * scale;
    dpred[i] = accumulate ? dpred[i] + g : g;
  }
}

void loss_sum(PointwiseLoss kind, const float* pred, const float* target, int64_t n, float* sum,
              Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  const int64_t blocks = (n + kPointwiseLossBlock - 1) / kPointwiseLossBlock;
  const CudaScratch block_sums(launch.device(), sizeof(double) * std::max<int64_t>(blocks, 1));
  auto* sums = reinterpret_cast<double*>(block_sums.f32());
  if (blocks > 0) {
    const auto grid = static_cast<unsigned int>(std::min<int64_t>(blocks, kMaxBlocks));
    LS_LAUNCH(loss_block_sums_kernel, grid, kThreads, 0, stream, kind, pred, target, n, blocks,
              sums);
    LS_CUDA_CHECK_LAUNCH();
  }
  LS_LAUNCH(loss_total_kernel, 1, kThreads, 0, stream, sums, blocks, sum);
  LS_CUDA_CHECK_LAUNCH();
}

void loss_backward(PointwiseLoss kind, const float* pred, const float* target, int64_t n,
                   const float* seed, float* dpred, bool accumulate, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(loss_backward_kernel, grid_for(n), kThreads, 0, stream, kind, pred, target, n, seed,
            dpred, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

}  // namespace

const PointwiseLossOps kCudaPointwiseLoss{
    .loss_sum = loss_sum,
    .loss_backward = loss_backward,
};
LS_REGISTER_OP_TABLE(PointwiseLossOps, DeviceKind::kCuda, kCudaPointwiseLoss);

}  // namespace ls::cuda_ops
