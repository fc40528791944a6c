// Differentiable functions on Vars (public): the ops a model's forward() is written with. Each one
// computes its output on the tape's stream and records its backward (lockstep/nn/autograd.h), so
// a model written with them trains on every device and strategy lockstep has.
//
// Layout: activations are row-major [rows, features]; a batch of B sequences of T tokens with C
// channels is [B*T, C], row b*T + t. Everything is asynchronous in stream order; bad shapes raise
// ls::Error (kind usage) naming both shapes. Matrix products round their operands to 16 bits when
// the tape's ForwardContext says bf16/f16 and accumulate in f32; every other op is f32.
// Dropout draws its masks from the tape's ForwardContext (seed, step, global row), so an example
// gets the same mask whatever the number of replicas; it is the identity unless training.
// A new op follows the same pattern (docs/architecture.md, "How to add an op"): compute the
// output with the ops, tape.output(), then tape.record(output, inputs, backward).
#pragma once

#include <cstdint>
#include <utility>

#include <lockstep/nn/autograd.h>
#include <lockstep/nn/pooling.h>

namespace ls::nn {

// ---- dense layers ------------------------------------------------------------------------------

// y = x W^T + b, W [out, in] (PyTorch's layout), b [out] or null.
Var linear(Tape& tape, const Var& x, const Var& weight, const Var* bias);
// linear with its output stored in bf16, in a bf16 step (precision kBF16; elsewhere exactly
// linear): for a layer whose consumer reads bf16, like a classifier head when the engine's
// cross-entropy takes bf16 logits (ForwardContext::logits_in_bf16). The product and the bias
// (rounded to bf16, as autocast rounds it) are summed in f32 and rounded once. Its backward
// takes a bf16 gradient as it is (bias gradients sum it). A weight with room for padded rows
// (Parameter::padded_rows: the transformers' vocabulary padded to a multiple of 128) and no bias
// gives [rows, padded_rows]: the extra columns are -infinity, which a softmax gives probability 0
// and cross-entropy a zero gradient; the weight's gradient stays [out, in].
Var linear_bf16_output(Tape& tape, const Var& x, const Var& weight, const Var* bias = nullptr);
// c = a b: a [m, k], b [k, n] -> [m, n].
Var matmul(Tape& tape, const Var& a, const Var& b);
// c[i] = a[i] b[i] for every i: a [batch, m, k], b [batch, k, n] -> [batch, m, n].
Var batched_matmul(Tape& tape, const Var& a, const Var& b);
// out = a + b, same shapes (residual connections).
Var add(Tape& tape, const Var& a, const Var& b);
// The same values with another shape (a view; same element count).
Var reshape(Tape& tape, const Var& x, const Shape& shape);

// out = alpha x (same shape).
Var scale(Tape& tape, const Var& x, float alpha);
// The values of a bf16 Var as f32 (exact), for the ops, which compute in f32; an f32 Var is
// returned as it is. A bf16 input (a constant), or a bf16 step's activation stored in bf16
// (layernorm's bf16_output), whose gradient then passes through unchanged.
Var to_f32(Tape& tape, const Var& x);

// ---- activations -------------------------------------------------------------------------------

Var relu(Tape& tape, const Var& x);
Var gelu(Tape& tape, const Var& x);      // tanh form (GPT-2's "gelu_new")
Var gelu_erf(Tape& tape, const Var& x);  // erf form 0.5 x (1 + erf(x / sqrt 2)) (BERT's "gelu")
// gelu(x + bias) (the erf form when erf_form), bias [cols] broadcast over the rows of x
// [rows, cols]: bit for bit gelu(linear's bias added to x), with one pass over memory less each
// way, for a Linear whose output only feeds GELU: linear(x, W, nullptr), then this with its bias.
Var bias_gelu(Tape& tape, const Var& x, const Var& bias, bool erf_form = false);
// A transformer's MLP, linear(gelu(linear(x, fc_weight, fc_bias)), proj_weight, proj_bias)
// (weights [out, in]; the erf form of GELU when erf_form): x [rows, in] -> [rows, out]. In a bf16
// step with the tanh form it is two products with the bias and GELU (and, in backward, GELU's
// gradient) in their epilogues, the [rows, ffn] activations kept in bf16 only; b1 is rounded to
// bf16 as autocast rounds it. Otherwise exactly the three functions it names.
Var mlp(Tape& tape, const Var& x, const Var& fc_weight, const Var& fc_bias, const Var& proj_weight,
        const Var& proj_bias, bool erf_form = false);
Var tanh(Tape& tape, const Var& x);
// Drops each element with probability p (scaling the rest by 1/(1-p)) when training. An example
// is row_len consecutive elements; `site` tells apart the dropout layers of one model.
Var dropout(Tape& tape, const Var& x, float p, uint64_t site, int64_t row_len);

// ---- sequences ---------------------------------------------------------------------------------

// out[i] = table[ids[i]]; ids: i32 tensor of n ids, table [vocab, dim] -> [n, dim].
Var embedding(Tape& tape, const Var& table, const Tensor& ids);
// y[r] = x[r] + table[r % period]: position embeddings (period T) or one token type (period 1).
Var add_table_rows(Tape& tape, const Var& x, const Var& table, int64_t period);
// Layer normalisation over the last dimension of x [rows, C]; gamma, beta [C]. bf16_output: in a
// bf16 step (elsewhere ignored) the output is stored in bf16 only, a bf16 `value` that
// nn::linear, nn::linear_bf16_output and nn::mlp multiply as it is: for a norm whose consumers
// are products (a pre-norm block's), not a residual stream.
Var layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta, float eps,
              bool bf16_output = false);
// A residual add and the LayerNorm of its sum in one pass (one read of each input, one write of
// the sum): {sum, layernorm(sum)} with sum = x + branch, both f32 [rows, C]. The same values and
// gradients as add then layernorm; bf16_output as layernorm's.
std::pair<Var, Var> add_layernorm(Tape& tape, const Var& x, const Var& branch, const Var& gamma,
                                  const Var& beta, float eps, bool bf16_output = false);

struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0;
  bool causal = false;
};
// Multi-head scaled dot-product attention on fused projections qkv [B*T, 3C] (q, k, v each C =
// heads * head_dim wide, head h in channels [h*D, (h+1)*D)) -> [B*T, C]. key_valid: i32 [B, T]
// (0 masks a padding key) or undefined. Attention probabilities get dropout p when training.
Var attention(Tape& tape, const Var& qkv, const Tensor& key_valid, const AttentionShape& shape,
              float dropout_p, uint64_t site);
// i32 of ids' shape: 1 where ids[i] != pad_id, 0 for padding (not differentiable): the key mask
// of attention and the `valid` of pool.
Tensor padding_mask(Tape& tape, const Tensor& ids, int32_t pad_id);
// x [B*T, C] -> [B, C] by `mode` over the valid positions (valid: i32 [B, T]).
Var pool(Tape& tape, const Var& x, const Tensor& valid, Pooling mode, int64_t batch, int64_t seq);

// ---- losses ------------------------------------------------------------------------------------

// Mean softmax cross-entropy over rows; labels i32 [rows]; a row labelled -100 (PyTorch's
// ignore_index) adds nothing to the loss and gets a zero gradient.
// The gradient of the logits is computed in the same pass and scaled by grad_scale (1/rows for a
// mean); the result must be the root of backward(). A defined `device_scale` (f32 [1], read on
// the device when the kernel runs) multiplies the gradient too (the engine's loss scale / global
// label count).
Var cross_entropy(Tape& tape, const Var& logits, const Tensor& labels, float grad_scale,
                  const Tensor& device_scale = Tensor());
inline Var cross_entropy(Tape& tape, const Var& logits, const Tensor& labels) {
  return cross_entropy(tape, logits, labels, 1.0f / static_cast<float>(logits->value.dim(0)));
}

// Sums over elements (f32 [1]), the form the loss contract asks for (lockstep/nn/loss.h); target
// is f32 of the prediction's shape; the sum is taken in double in a fixed order (repeatable).
// sum of (pred - target)^2:
Var squared_error_sum(Tape& tape, const Var& pred, const Tensor& target);
// sum of max(x, 0) - x t + log(1 + e^-|x|) over logits x and probabilities t (PyTorch's
// BCEWithLogitsLoss with reduction='sum'):
Var bce_with_logits_sum(Tape& tape, const Var& logits, const Tensor& target);

}  // namespace ls::nn
