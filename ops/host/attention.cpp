// Host kernels of ops/attention.h. The softmax and its backward run one row of keys at a time,
// rows split over host_parallel_for; each row's sums run over its keys in order, so results do
// not depend on the chunking. In place is allowed: a row reads every input it needs before it
// writes (or reads and writes element j together). The layout changes copy runs of D floats.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/host/host_device.h"
#include "ops/host/bf16_convert.h"
#include "ops/host/fast_math.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// One query row: p[j] = exp(scale s[j] - max) / sum over unmasked keys, 0 for masked keys.
// valid: the keys of this row's batch (or null); keys j >= limit are masked (causal).
LS_VECTOR_CLONES void softmax_row(const float* s, const int32_t* valid, int64_t t, int64_t limit,
                                  float scale, float* p) {
  // Every loop below reads its arrays unconditionally (valid has t entries), so that each one
  // vectorises; the maximum runs by 16 lanes (exact in any order) for the same reason.
  constexpr int64_t kLanes = 16;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNone);
  for (int64_t j = 0; j < limit; ++j) {
    const float v = valid == nullptr ? scale * s[j] : (valid[j] != 0 ? scale * s[j] : kNone);
    lanes[j % kLanes] = v > lanes[j % kLanes] ? v : lanes[j % kLanes];
  }
  float max = kNone;
  for (float v : lanes) max = v > max ? v : max;
  if (max == kNone) {  // every key masked
    std::fill(p, p + t, 0.0f);
    return;
  }
  for (int64_t j = 0; j < limit; ++j) p[j] = host_math::fast_exp(scale * s[j] - max);
  if (valid != nullptr) {
    for (int64_t j = 0; j < limit; ++j) p[j] = valid[j] != 0 ? p[j] : 0.0f;
  }
  std::fill(p + limit, p + t, 0.0f);
  const float sum = lane_sum(limit, [p](int64_t j) { return p[j]; });
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < limit; ++j) p[j] *= inv;
}

// One row of the softmax's backward: ds[j] = scale p[j] (dp[j] - sum_k dp[k] p[k]) for the keys
// j < limit, 0 for the rest (masked by causality: p is 0 there, dp is not read).
LS_VECTOR_CLONES void softmax_backward_row(const float* p, const float* dp, int64_t cols,
                                           int64_t limit, float scale, float* ds) {
  const float dot = lane_sum(limit, [p, dp](int64_t j) { return dp[j] * p[j]; });
  for (int64_t j = 0; j < limit; ++j) ds[j] = scale * p[j] * (dp[j] - dot);
  std::fill(ds + limit, ds + cols, 0.0f);
}

void attention_softmax(const float* scores, const int32_t* key_valid, int64_t batch_heads,
                       int64_t heads, int64_t t, bool causal, float scale, float* probs,
                       Stream& stream) {
  LS_ASSERT(batch_heads >= 0 && heads > 0 && t >= 0,
            "attention_softmax sizes batch_heads=", batch_heads, " heads=", heads, " t=", t);
  const int64_t rows = batch_heads * t;
  if (rows == 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, rows, rows_grain(t), [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t bh = r / t, i = r % t;
        const int32_t* valid = key_valid == nullptr ? nullptr : key_valid + (bh / heads) * t;
        softmax_row(scores + r * t, valid, t, causal ? i + 1 : t, scale, probs + r * t);
      }
    });
  });
}

void attention_softmax_backward(const float* probs, const float* dprobs, int64_t rows, int64_t cols,
                                bool causal, float scale, float* dscores, Stream& stream) {
  LS_ASSERT(rows >= 0 && cols >= 0, "attention_softmax_backward sizes rows=", rows, " cols=", cols);
  if (rows == 0 || cols == 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, rows, rows_grain(cols), [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t limit = causal ? r % cols + 1 : cols;
        softmax_backward_row(probs + r * cols, dprobs + r * cols, cols, limit, scale,
                             dscores + r * cols);
      }
    });
  });
}

// Where run r of the token-major [B, T, G, H, D] layout (r = its index (b, t, g, h), D elements)
// starts in the head-major [G, B, H, T, D] one.
int64_t head_major_start(int64_t r, const std::array<int64_t, 5>& dims) {
  const int64_t nb = dims[0], nt = dims[1], ng = dims[2], nh = dims[3], nd = dims[4];
  const int64_t h = r % nh, g = (r / nh) % ng, t = (r / (nh * ng)) % nt;
  const int64_t b = r / (nh * ng * nt);
  return (((g * nb + b) * nh + h) * nt + t) * nd;
}

// Copies runs of D floats between [B, T, G, H, D] (token-major) and [G, B, H, T, D]
// (head-major); to_head_major says which way. Each destination run is written once.
void permute_heads(const float* src, float* dst, std::array<int64_t, 5> dims, bool to_head_major,
                   bool accumulate, Stream& stream) {
  const int64_t runs = dims[0] * dims[1] * dims[2] * dims[3], nd = dims[4];
  if (runs == 0 || nd == 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, runs, rows_grain(nd), [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t head_major = head_major_start(r, dims);
        const float* from = src + (to_head_major ? r * nd : head_major);
        float* to = dst + (to_head_major ? head_major : r * nd);
        if (accumulate) {
          for (int64_t d = 0; d < nd; ++d) to[d] += from[d];
        } else {
          std::copy(from, from + nd, to);
        }
      }
    });
  });
}

// split_heads with each run rounded to bf16 as it is copied (round_to_bf16's vector path).
void split_heads_bf16(const float* x, uint16_t* y, std::array<int64_t, 5> dims, Stream& stream) {
  const int64_t runs = dims[0] * dims[1] * dims[2] * dims[3], nd = dims[4];
  if (runs == 0 || nd == 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, runs, rows_grain(nd), [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        round_to_bf16(x + r * nd, nd, y + head_major_start(r, dims));
      }
    });
  });
}

void split_heads(const float* x, float* y, std::array<int64_t, 5> dims, bool accumulate,
                 Stream& stream) {
  permute_heads(x, y, dims, true, accumulate, stream);
}

void merge_heads(const float* y, float* x, std::array<int64_t, 5> dims, bool accumulate,
                 Stream& stream) {
  permute_heads(y, x, dims, false, accumulate, stream);
}

const AttentionOps kHostAttention{
    .attention_softmax = attention_softmax,
    .attention_softmax_backward = attention_softmax_backward,
    .split_heads = split_heads,
    .split_heads_bf16 = split_heads_bf16,
    .merge_heads = merge_heads,
};
LS_REGISTER_OP_TABLE(AttentionOps, DeviceKind::kHost, kHostAttention);

}  // namespace
}  // namespace ls
