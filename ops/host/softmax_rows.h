// One row of attention's masked, scaled softmax and of its backward: the per-row arithmetic the
// host's attention kernels share (ops/host/attention.cpp runs them over a whole [B*H, T, T] score
// tensor, ops/host/fused_attention.cpp over one block of query rows held in cache). Vectorised,
// and every sum runs in a fixed order, so a row's result does not depend on who calls it.
#pragma once

#include <cstdint>

namespace ls {

// One query row of `cols` keys: p[j] = exp(scale s[j] - max) / sum over the unmasked keys, 0 for
// the masked ones. valid: the keys of this row's batch (or null), at least `limit` entries; keys
// j >= limit are masked (causal). A row with every key masked is all 0. p may be s (in place).
void softmax_row(const float* s, const int32_t* valid, int64_t cols, int64_t limit, float scale,
                 float* p);

// One row of the softmax's backward: ds[j] = scale p[j] (dp[j] - sum_k dp[k] p[k]) for the keys
// j < limit, 0 for the rest (masked by causality: p is 0 there, dp is not read). ds may be dp.
void softmax_backward_row(const float* p, const float* dp, int64_t cols, int64_t limit, float scale,
                          float* ds);

}  // namespace ls
