// Multi-head self-attention (nn::attention, declared in lockstep/nn/functional.h), two ways:
// - fused (ops/attention.h's fused_attention): the host's kernels take q, k, v a head and a block
//   of query rows at a time and never store the [T, T] probabilities; backward recomputes them.
//   On CUDA (bf16) the kernels read q, k, v straight from the packed projections and write the
//   context token-major (packed_attention): no head-major copies either.
//   Used where the device has the kernels (host; CUDA in bf16 at head dims 16, 32, 64), the
//   products are f32 or bf16, there is no dropout on the probabilities (the masks are drawn over
//   the whole [T, T] tensor), and, on the host, the sequence is long enough that fusing measured
//   faster (ops/attention.h, use_fused_attention).
// - unfused: the six per-head products (ops/causal_gemm.h) around the row softmax, with the
//   probabilities kept for backward. CUDA in f32 and at other head dims, f16, attention
//   dropout, and LOCKSTEP_FUSED_ATTENTION=off.
// Both compute the same function; their results differ in the order of the f32 sums only.
#include <lockstep/nn/functional.h>

#include <cmath>

#include <lockstep/error.h>
#include "engine/model/nn/bf16_values.h"
#include "engine/model/nn/like_f32.h"
#include "ops/attention.h"
#include "ops/causal_gemm.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"

namespace ls::nn {
namespace {

// What both paths share: the shape, and the layout change into head-major operands.
struct Heads {
  int64_t b, t, h, d, bh;
  bool cast_once;  // bf16: operands are split straight into bf16 and serve forward and backward
  Device dev;

  // [B*T, G*C] -> head-major [G, B, H, T, D], each group a batch of B*H [T, D] matrices, in the
  // products' operand type.
  Tensor split(const Tensor& src, int64_t groups, Stream& stream) const {
    Tensor out = Tensor::empty({groups, b, h, t, d}, cast_once ? DType::kBF16 : DType::kF32, dev);
    if (cast_once) {
      split_heads_bf16(src, out, {b, t, groups, h, d}, stream);
    } else {
      split_heads(src, out, {b, t, groups, h, d}, false, stream);
    }
    return out;
  }
  // Matrix group g of a [G, B, H, T, D] tensor as [B*H, T, D].
  Tensor group(const Tensor& x, int64_t g) const { return x.view(g * bh * t * d, {bh, t, d}); }
};

Var fused(Tape& tape, const Var& qkv, const Tensor& key_valid, const Heads& hd, bool causal,
          float scale) {
  Stream& stream = tape.stream();
  const Tensor heads = hd.split(qkv->value, 3, stream);
  Tensor context = Tensor::empty({hd.bh, hd.t, hd.d}, DType::kF32, hd.dev);
  fused_attention(hd.group(heads, 0), hd.group(heads, 1), hd.group(heads, 2), key_valid, hd.h,
                  causal, scale, context, stream);
  Tensor y = Tensor::empty({hd.b * hd.t, hd.h * hd.d}, DType::kF32, hd.dev);
  merge_heads(context, y, {hd.b, hd.t, 1, hd.h, hd.d}, false, stream);

  Var out = tape.output(std::move(y), {&qkv});
  tape.record(out, {qkv}, [=, &stream](const Tensor& dy) {
    if (!qkv->requires_grad) return;
    const Tensor dcontext = hd.group(hd.split(dy, 1, stream), 0);
    Tensor dheads = Tensor::empty({3, hd.b, hd.h, hd.t, hd.d}, DType::kF32, hd.dev);
    fused_attention_backward(hd.group(heads, 0), hd.group(heads, 1), hd.group(heads, 2), dcontext,
                             key_valid, hd.h, causal, scale, hd.group(dheads, 0),
                             hd.group(dheads, 1), hd.group(dheads, 2), stream);
    const bool add = Tape::begin_grad(*qkv);
    merge_heads(dheads, qkv->grad, {hd.b, hd.t, 3, hd.h, hd.d}, add, stream);
  });
  return out;
}

// The packed path (CUDA): attention read from qkv as the projection wrote it and written
// token-major, so no split_heads / merge_heads copies, forward or backward.
Var packed(Tape& tape, const Var& qkv, const Tensor& key_valid, const Heads& hd, bool causal,
           float scale) {
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty({hd.b * hd.t, hd.h * hd.d}, DType::kF32, hd.dev);
  // The output projection multiplies a bf16 copy (the packed path runs in bf16 only).
  Tensor y16 = Tensor::empty(y.shape(), DType::kBF16, hd.dev);
  packed_attention(qkv->value, key_valid, hd.b, hd.h, causal, scale, y, stream, y16);
  Var out = tape.output(std::move(y), {&qkv});
  out->value16 = std::move(y16);
  tape.record(out, {qkv}, [=, &stream](const Tensor& dy) {
    if (!qkv->requires_grad) return;
    // qkv's only use is this, and its linear multiplies the gradient in bf16: written rounded,
    // with no f32 [rows, 3 * hidden] gradient and no cast of it (VarNode::bf16_grad_ok).
    if (takes_bf16_gradient(*qkv)) {
      qkv->grad = Tensor::empty(qkv->value.shape(), DType::kBF16, hd.dev);
      qkv->grad_written = true;
      packed_attention_backward(qkv->value, dy, key_valid, hd.b, hd.h, causal, scale, qkv->grad,
                                false, stream);
      return;
    }
    const bool add = Tape::begin_grad(*qkv);
    packed_attention_backward(qkv->value, dy, key_valid, hd.b, hd.h, causal, scale, qkv->grad,
                              add, stream);
  });
  return out;
}

Var unfused(Tape& tape, const Var& qkv, const Tensor& key_valid, const Heads& hd, bool causal,
            float scale, float dropout_p, uint64_t site) {
  const int64_t b = hd.b, t = hd.t, h = hd.h, d = hd.d, bh = hd.bh;
  Stream& stream = tape.stream();
  const Device dev = hd.dev;
  const Precision precision = tape.context().precision;
  // In bf16 every operand is cast once and the cast serves forward and backward (six casts for
  // six products, not twelve; see linear in functional.cpp); q, k, v and dcontext are cast as
  // they are split into heads. Otherwise the products round their operands themselves (f16) or
  // take them as they are (f32).
  const auto operand_of = [cast_once = hd.cast_once, &stream](const Tensor& x) {
    return cast_once ? cast_to_bf16(x, stream) : x;
  };
  const Tensor heads = hd.split(qkv->value, 3, stream);
  const Tensor q = hd.group(heads, 0), k = hd.group(heads, 1), v = hd.group(heads, 2);
  Tensor scores = Tensor::empty({bh, t, t}, DType::kF32, dev);
  // The six products per head (ops/causal_gemm.h): s = a b^T, and c = L y or L^T y for L the
  // probabilities or dS. Under a causal mask they skip the key blocks above the diagonal, where
  // L is zero; otherwise one block of all T rows is the full product.
  const int64_t block = causal ? causal_block_rows(t, precision, planning_kind(dev.kind)) : t;
  const auto scores_of = [=](const Tensor& a, const Tensor& b, const Tensor& s, Stream& on) {
    causal_scores(a, b, s, block, on, precision);
  };
  const auto apply = [=](const Tensor& l, bool transposed, const Tensor& y, const Tensor& out,
                         Stream& on) { causal_apply(l, transposed, y, out, block, on, precision); };
  scores_of(q, k, scores, stream);
  attention_softmax(scores, key_valid, h, causal, scale, scores, stream);  // in place
  const Tensor probs = scores;
  const ForwardContext& ctx = tape.context();
  const bool drop = ctx.training && dropout_p > 0.0f;
  const uint64_t key = drop ? dropout_key(ctx.seed, ctx.step, site) : 0;
  if (drop) tape.note_step_dependent();
  const int64_t first_row = ctx.first_row, row_len = h * t * t;
  Tensor dropped = probs;
  if (drop) {
    dropped = like_f32(probs);
    ls::dropout(probs, dropped, row_len, first_row, dropout_p, key, false, stream);
  }
  Tensor context = Tensor::empty({bh, t, d}, DType::kF32, dev);
  const Tensor p_operand = operand_of(dropped);
  apply(p_operand, false, v, context, stream);
  Tensor y = Tensor::empty({b * t, h * d}, DType::kF32, dev);
  merge_heads(context, y, {b, t, 1, h, d}, false, stream);

  Var out = tape.output(std::move(y), {&qkv});
  tape.record(out, {qkv}, [=, &stream](const Tensor& dy) {
    if (!qkv->requires_grad) return;
    const Tensor dcontext = hd.group(hd.split(dy, 1, stream), 0);
    Tensor dheads = Tensor::empty({3, b, h, t, d}, DType::kF32, dev);
    Tensor dq = hd.group(dheads, 0), dk = hd.group(dheads, 1), dv = hd.group(dheads, 2);
    apply(p_operand, true, dcontext, dv, stream);
    // Causal: dprobs above the block diagonal stays unwritten; nothing below reads it there.
    Tensor dprobs = Tensor::empty({bh, t, t}, DType::kF32, dev);
    scores_of(dcontext, v, dprobs, stream);
    if (drop) {
      Tensor undropped = like_f32(dprobs);
      ls::dropout(dprobs, undropped, row_len, first_row, dropout_p, key, false, stream);
      dprobs = undropped;
    }
    attention_softmax_backward(probs, dprobs, scale, dprobs, stream, causal);  // now d(scores)
    const Tensor ds_operand = operand_of(dprobs);
    apply(ds_operand, false, k, dq, stream);
    apply(ds_operand, true, q, dk, stream);
    const bool add = Tape::begin_grad(*qkv);
    merge_heads(dheads, qkv->grad, {b, t, 3, h, d}, add, stream);
  });
  return out;
}

}  // namespace

Var attention(Tape& tape, const Var& qkv, const Tensor& key_valid, const AttentionShape& shape,
              float dropout_p, uint64_t site) {
  const int64_t b = shape.batch, t = shape.seq, h = shape.heads;
  const Tensor& x = qkv->value;
  LS_CHECK(b > 0 && t > 0 && h > 0 && x.ndim() == 2 && x.dim(0) == b * t && x.dim(1) % (3 * h) == 0,
           "attention: qkv is ", x.describe(), "; expected [batch*seq, 3*heads*head_dim] = [",
           b * t, ", a multiple of ", 3 * h, "]");
  const int64_t d = x.dim(1) / (3 * h);
  const Precision precision = tape.context().precision;
  const Heads heads{.b = b,
                    .t = t,
                    .h = h,
                    .d = d,
                    .bh = b * h,
                    .cast_once = precision == Precision::kBF16,
                    .dev = x.device()};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const bool drop = tape.context().training && dropout_p > 0.0f;
  const DeviceKind kind = planning_kind(heads.dev.kind);
  if (!drop && use_fused_attention(kind, t, d, precision)) {
    if (packed_attention_available(kind, d, precision))
      return packed(tape, qkv, key_valid, heads, shape.causal, scale);
    return fused(tape, qkv, key_valid, heads, shape.causal, scale);
  }
  return unfused(tape, qkv, key_valid, heads, shape.causal, scale, dropout_p, site);
}

}  // namespace ls::nn
