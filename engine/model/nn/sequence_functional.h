// Differentiable functions on token sequences, the transformer's building blocks. Same pattern as
// engine/model/nn/functional.h: compute on the tape's stream, tape.output(), tape.record().
// Shapes: a batch of B sequences of T tokens with C channels is [B*T, C], row b*T + t.
// Dropout draws its masks from the tape's ForwardContext (seed, step, global row), so the same
// example gets the same mask whatever the number of replicas; it is the identity unless the
// context says training. Everything is asynchronous in stream order.
#pragma once

#include <cstdint>

#include "engine/model/autograd.h"
#include "ops/pooling.h"

namespace ls::nn {

// out[i] = table[ids[i]]; ids: i32 tensor of n ids, table [vocab, dim] -> [n, dim].
Var embedding(Tape& tape, const Var& table, const Tensor& ids);
// y[r] = x[r] + table[r % period]: position embeddings (period T) or one token type (period 1).
Var add_table_rows(Tape& tape, const Var& x, const Var& table, int64_t period);
// Layer normalisation over the last dimension of x [rows, C]; gamma, beta [C].
Var layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta, float eps);
// GELU, erf form 0.5 x (1 + erf(x / sqrt 2)), as BERT's "gelu".
Var gelu_erf(Tape& tape, const Var& x);
// Drops each element with probability p (scaling the rest by 1/(1-p)) when training. An example
// is row_len consecutive elements; `site` tells apart the dropout layers of one model.
Var dropout(Tape& tape, const Var& x, float p, uint64_t site, int64_t row_len);
// The same values with another shape (a view; same element count).
Var reshape(Tape& tape, const Var& x, const Shape& shape);

struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0;
  bool causal = false;
};
// Multi-head scaled dot-product attention on fused projections qkv [B*T, 3C] (q, k, v each C =
// heads * head_dim wide, head h in channels [h*D, (h+1)*D)) -> [B*T, C]. key_valid: i32 [B, T]
// (0 masks a padding key) or undefined. Attention probabilities get dropout p when training.
Var attention(Tape& tape, const Var& qkv, const Tensor& key_valid, const AttentionShape& shape,
              float dropout_p, uint64_t site);
// x [B*T, C] -> [B, C] by `mode` over the valid positions (valid: i32 [B, T]).
Var pool(Tape& tape, const Var& x, const Tensor& valid, ls::Pooling mode, int64_t batch,
         int64_t seq);

}  // namespace ls::nn
