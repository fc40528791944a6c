// Host kernels of ops/attention.h. The softmax and its backward run one row of keys at a time,
// rows split over host_parallel_for; each row's sums run over its keys in order, so results do
// not depend on the chunking. In place is allowed: a row reads every input it needs before it
// writes (or reads and writes element j together). The layout changes copy runs of D floats.
#include "ops/attention.h"

#include <algorithm>

#include "engine/core/host/host_device.h"
#include "ops/host/bf16_convert.h"
#include "ops/host/host_ops.h"
#include "ops/host/softmax_rows.h"

namespace ls {
namespace {

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
