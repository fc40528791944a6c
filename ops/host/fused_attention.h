// The host kernels of fused attention (ops/host/fused_attention.cpp), for the host's table of
// FusedAttentionOps (registered in that file); the contract is the slots' in ops/attention.h.
#pragma once

#include <cstdint>

#include <lockstep/stream.h>

namespace ls {

void host_fused_attention(const void* q, const void* k, const void* v, bool bf16,
                          const int32_t* key_valid, int64_t batch_heads, int64_t heads, int64_t t,
                          int64_t d, bool causal, float scale, int64_t block_rows, float* out,
                          Stream& stream);

void host_fused_attention_backward(const void* q, const void* k, const void* v, const void* dout,
                                   bool bf16, const int32_t* key_valid, int64_t batch_heads,
                                   int64_t heads, int64_t t, int64_t d, bool causal, float scale,
                                   int64_t block_rows, float* dq, float* dk, float* dv,
                                   Stream& stream);

}  // namespace ls
