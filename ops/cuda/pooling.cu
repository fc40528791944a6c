// CUDA kernels of ops/pooling.h: one thread per (example, channel) walks the example's mask and
// tokens in order (coalesced across channels), so kMean sums in the host kernel's order and
// results are bitwise repeatable. A mask value counts as a real token when it is non-zero.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/cuda_launch.h"
#include "ops/pooling.h"

namespace ls::cuda_ops {
namespace {

// The position kFirst / kLast pools in one row of the mask, or -1 when no token is real.
__device__ int64_t pooled_position(const int32_t* valid, int64_t t, Pooling mode) {
  if (mode == Pooling::kFirst) {
    for (int64_t i = 0; i < t; ++i) {
      if (valid[i] != 0) return i;
    }
  } else {
    for (int64_t i = t - 1; i >= 0; --i) {
      if (valid[i] != 0) return i;
    }
  }
  return -1;
}

__device__ int64_t real_tokens(const int32_t* valid, int64_t t) {
  int64_t count = 0;
  for (int64_t i = 0; i < t; ++i) count += valid[i] != 0 ? 1 : 0;
  return count;
}

__global__ void pool_kernel(const float* x, const int32_t* valid, int64_t batch, int64_t t,
                            int64_t c, Pooling mode, float* y) {
  LS_GRID_STRIDE_LOOP(i, batch * c) {
    const int64_t b = i / c, k = i % c;
    const int32_t* v = valid + b * t;
    const float* xb = x + b * t * c + k;
    if (mode != Pooling::kMean) {
      const int64_t pos = pooled_position(v, t, mode);
      y[i] = pos < 0 ? 0.0f : xb[pos * c];
      continue;
    }
    float sum = 0.0f;
    int64_t count = 0;
    for (int64_t s = 0; s < t; ++s) {
      if (v[s] == 0) continue;
      sum += xb[s * c];
      ++count;
    }
    y[i] = count == 0 ? 0.0f : sum / static_cast<float>(count);
  }
}

__global__ void pool_backward_kernel(const float* dy, const int32_t* valid, int64_t batch,
                                     int64_t t, int64_t c, Pooling mode, float* dx,
                                     bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, batch * c) {
    const int64_t b = i / c, k = i % c;
    const int32_t* v = valid + b * t;
    const int64_t pos = mode == Pooling::kMean ? -1 : pooled_position(v, t, mode);
    const float g = mode == Pooling::kMean ? dy[i] / static_cast<float>(real_tokens(v, t)) : dy[i];
    float* dxb = dx + b * t * c + k;
    for (int64_t s = 0; s < t; ++s) {
      const bool gets = mode == Pooling::kMean ? v[s] != 0 : s == pos;
      if (gets) {
        dxb[s * c] = accumulate ? dxb[s * c] + g : g;
      } else if (!accumulate) {
        dxb[s * c] = 0.0f;
      }
    }
  }
}

__global__ void token_mask_kernel(const int32_t* tokens, int64_t n, int32_t pad_id,
                                  int32_t* valid) {
  LS_GRID_STRIDE_LOOP(i, n) { valid[i] = tokens[i] != pad_id ? 1 : 0; }
}

}  // namespace

void pool(const float* x, const int32_t* valid, int64_t batch, int64_t t, int64_t c, Pooling mode,
          float* y, Stream& on) {
  const CudaLaunch launch(on);
  if (batch * c == 0) return;
  LS_LAUNCH(pool_kernel, grid_for(batch * c), kThreads, 0, launch.stream(), x, valid, batch, t, c,
            mode, y);
  LS_CUDA_CHECK_LAUNCH();
}

void pool_backward(const float* dy, const int32_t* valid, int64_t batch, int64_t t, int64_t c,
                   Pooling mode, float* dx, bool accumulate, Stream& on) {
  const CudaLaunch launch(on);
  if (batch * t * c == 0) return;
  LS_LAUNCH(pool_backward_kernel, grid_for(batch * c), kThreads, 0, launch.stream(), dy, valid,
            batch, t, c, mode, dx, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void token_mask(const int32_t* tokens, int64_t n, int32_t pad_id, int32_t* valid, Stream& on) {
  const CudaLaunch launch(on);
  if (n == 0) return;
  LS_LAUNCH(token_mask_kernel, grid_for(n), kThreads, 0, launch.stream(), tokens, n, pad_id, valid);
  LS_CUDA_CHECK_LAUNCH();
}

const PoolingOps kCudaPooling{
    .pool = pool,
    .pool_backward = pool_backward,
    .token_mask = token_mask,
};
LS_REGISTER_OP_TABLE(PoolingOps, DeviceKind::kCuda, kCudaPooling);

}  // namespace ls::cuda_ops
