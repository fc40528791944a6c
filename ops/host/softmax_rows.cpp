// Host kernels of ops/host/softmax_rows.h. Built for AVX-512, AVX2 and baseline (LS_VECTOR_CLONES);
// without FMA contraction, so every clone gives the same bits.
#include "ops/host/softmax_rows.h"

#include <algorithm>
#include <limits>

#include "ops/host/fast_math.h"
#include "ops/host/host_ops.h"

namespace ls {

LS_VECTOR_CLONES void softmax_row(const float* s, const int32_t* valid, int64_t cols, int64_t limit,
                                  float scale, float* p) {
  // Every loop below reads its arrays unconditionally below `limit`, so that each one
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
    std::fill(p, p + cols, 0.0f);
    return;
  }
  for (int64_t j = 0; j < limit; ++j) p[j] = host_math::fast_exp(scale * s[j] - max);
  if (valid != nullptr) {
    for (int64_t j = 0; j < limit; ++j) p[j] = valid[j] != 0 ? p[j] : 0.0f;
  }
  std::fill(p + limit, p + cols, 0.0f);
  const float sum = lane_sum(limit, [p](int64_t j) { return p[j]; });
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < limit; ++j) p[j] *= inv;
}

LS_VECTOR_CLONES void softmax_backward_row(const float* p, const float* dp, int64_t cols,
                                           int64_t limit, float scale, float* ds) {
  const float dot = lane_sum(limit, [p, dp](int64_t j) { return dp[j] * p[j]; });
  for (int64_t j = 0; j < limit; ++j) ds[j] = scale * p[j] * (dp[j] - dot);
  std::fill(ds + limit, ds + cols, 0.0f);
}

}  // namespace ls
