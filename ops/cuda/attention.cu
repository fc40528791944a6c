// CUDA kernels of ops/attention.h. The softmax and its backward run one block per query row,
// threads striding over the keys; block reductions combine warps in a fixed order and the block
// size depends only on T, so results are bitwise repeatable. In place is allowed: each thread
// reads and writes only its own keys, after the reductions' barriers. The layout changes map
// one thread to one element (grid-stride).
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "ops/attention.h"
#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_launch.h"

namespace ls::cuda_ops {
namespace {

// Threads per row: the keys rounded up to a warp, at most kThreads.
int row_threads(int64_t cols) {
  return static_cast<int>(std::clamp<int64_t>((cols + kWarp - 1) / kWarp * kWarp, kWarp, kThreads));
}

// Block r: query row r % t of batch-head r / t. Masked keys (j > i when causal, key_valid 0)
// get 0; a row with no key left is all 0.
__global__ void attention_softmax_kernel(const float* scores, const int32_t* key_valid,
                                         int64_t heads, int64_t t, bool causal, float scale,
                                         float* probs) {
  __shared__ float shared[kWarp];
  const int64_t r = blockIdx.x;
  const int64_t limit = causal ? r % t + 1 : t;
  const int32_t* valid = key_valid == nullptr ? nullptr : key_valid + (r / t / heads) * t;
  const float* s = scores + r * t;
  float* p = probs + r * t;
  float max_value = -INFINITY;
  for (int64_t j = threadIdx.x; j < limit; j += blockDim.x) {
    if (valid == nullptr || valid[j] != 0) max_value = fmaxf(max_value, scale * s[j]);
  }
  max_value = block_max(max_value, shared);
  if (max_value == -INFINITY) {  // every key masked (uniform across the block)
    for (int64_t j = threadIdx.x; j < t; j += blockDim.x) p[j] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) {
    const bool keep = j < limit && (valid == nullptr || valid[j] != 0);
    const float e = keep ? expf(scale * s[j] - max_value) : 0.0f;
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / block_sum(sum, shared);
  for (int64_t j = threadIdx.x; j < t; j += blockDim.x) p[j] *= inv;
}

// Block r: one row; causal, keys j > r % cols get 0 without dprobs there being read.
__global__ void attention_softmax_backward_kernel(const float* probs, const float* dprobs,
                                                  int64_t cols, bool causal, float scale,
                                                  float* dscores) {
  __shared__ float shared[kWarp];
  const int64_t r = blockIdx.x;
  const int64_t limit = causal ? r % cols + 1 : cols;
  const float* p = probs + r * cols;
  const float* dp = dprobs + r * cols;
  float* ds = dscores + r * cols;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < limit; j += blockDim.x) dot += dp[j] * p[j];
  dot = block_sum(dot, shared);  // ends with a barrier: every read of other keys is done
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    ds[j] = j < limit ? scale * p[j] * (dp[j] - dot) : 0.0f;
  }
}

// Where element i of the token-major [B, T, G, H, D] tensor sits in [G, B, H, T, D].
__device__ inline int64_t head_major_index(int64_t i, int64_t nb, int64_t nt, int64_t ng,
                                           int64_t nh, int64_t nd) {
  const int64_t d = i % nd, h = (i / nd) % nh, g = (i / (nd * nh)) % ng;
  const int64_t t = (i / (nd * nh * ng)) % nt, b = i / (nd * nh * ng * nt);
  return (((g * nb + b) * nh + h) * nt + t) * nd + d;
}

// Element i of the token-major [B, T, G, H, D] tensor <-> its place in [G, B, H, T, D].
__global__ void permute_heads_kernel(const float* src, float* dst, int64_t nb, int64_t nt,
                                     int64_t ng, int64_t nh, int64_t nd, bool to_head_major,
                                     bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, nb * nt * ng * nh * nd) {
    const int64_t head_major = head_major_index(i, nb, nt, ng, nh, nd);
    const int64_t from = to_head_major ? i : head_major;
    const int64_t to = to_head_major ? head_major : i;
    dst[to] = accumulate ? dst[to] + src[from] : src[from];
  }
}

__global__ void split_heads_bf16_kernel(const float* x, uint16_t* y, int64_t nb, int64_t nt,
                                        int64_t ng, int64_t nh, int64_t nd) {
  LS_GRID_STRIDE_LOOP(i, nb * nt * ng * nh * nd) {
    y[head_major_index(i, nb, nt, ng, nh, nd)] = f32_to_bf16_bits(x[i]);
  }
}

void launch_permute(const float* src, float* dst, const std::array<int64_t, 5>& dims,
                    bool to_head_major, bool accumulate, Stream& on) {
  const CudaLaunch launch(on);
  const int64_t n = dims[0] * dims[1] * dims[2] * dims[3] * dims[4];
  if (n == 0) return;
  LS_LAUNCH(permute_heads_kernel, grid_for(n), kThreads, 0, launch.stream(), src, dst, dims[0],
            dims[1], dims[2], dims[3], dims[4], to_head_major, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

void check_rows(const char* op, int64_t rows) {
  LS_CHECK(rows <= INT_MAX, op, ": ", rows, " rows is more than one launch handles (", INT_MAX,
           "); split the batch");
}

}  // namespace

void attention_softmax(const float* scores, const int32_t* key_valid, int64_t batch_heads,
                       int64_t heads, int64_t t, bool causal, float scale, float* probs,
                       Stream& on) {
  const CudaLaunch launch(on);
  const int64_t rows = batch_heads * t;
  if (rows == 0) return;
  check_rows("attention_softmax", rows);
  LS_LAUNCH(attention_softmax_kernel, static_cast<unsigned int>(rows), row_threads(t), 0,
            launch.stream(), scores, key_valid, heads, t, causal, scale, probs);
  LS_CUDA_CHECK_LAUNCH();
}

void attention_softmax_backward(const float* probs, const float* dprobs, int64_t rows, int64_t cols,
                                bool causal, float scale, float* dscores, Stream& on) {
  const CudaLaunch launch(on);
  if (rows == 0 || cols == 0) return;
  check_rows("attention_softmax_backward", rows);
  LS_LAUNCH(attention_softmax_backward_kernel, static_cast<unsigned int>(rows), row_threads(cols),
            0, launch.stream(), probs, dprobs, cols, causal, scale, dscores);
  LS_CUDA_CHECK_LAUNCH();
}

void split_heads(const float* x, float* y, std::array<int64_t, 5> dims, bool accumulate,
                 Stream& on) {
  launch_permute(x, y, dims, true, accumulate, on);
}

void split_heads_bf16(const float* x, uint16_t* y, std::array<int64_t, 5> dims, Stream& on) {
  const CudaLaunch launch(on);
  const int64_t n = dims[0] * dims[1] * dims[2] * dims[3] * dims[4];
  if (n == 0) return;
  LS_LAUNCH(split_heads_bf16_kernel, grid_for(n), kThreads, 0, launch.stream(), x, y, dims[0],
            dims[1], dims[2], dims[3], dims[4]);
  LS_CUDA_CHECK_LAUNCH();
}

void merge_heads(const float* y, float* x, std::array<int64_t, 5> dims, bool accumulate,
                 Stream& on) {
  launch_permute(y, x, dims, false, accumulate, on);
}

const AttentionOps kCudaAttention{
    .attention_softmax = attention_softmax,
    .attention_softmax_backward = attention_softmax_backward,
    .split_heads = split_heads,
    .split_heads_bf16 = split_heads_bf16,
    .merge_heads = merge_heads,
};
LS_REGISTER_OP_TABLE(AttentionOps, DeviceKind::kCuda, kCudaAttention);

}  // namespace ls::cuda_ops
