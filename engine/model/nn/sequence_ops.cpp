// Differentiable sequence functions: embedding, layernorm, dropout, pooling (declared in
// lockstep/nn/functional.h; attention is in attention.cpp).
// Every backward captures the Vars and saved tensors it needs by value, so they live until it has
// run. Ops that always accumulate into a gradient (embedding, layernorm's dgamma) get a zeroed
// gradient first when theirs is the first contribution to a non-parameter Var.
#include <lockstep/nn/functional.h>

#include <cmath>

#include <lockstep/error.h>
#include "engine/model/nn/like_f32.h"
#include "engine/model/nn/recorded_ops.h"
#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "ops/pooling.h"

namespace ls::nn {
namespace {

// Prepares v's gradient for an op that can only add into it.
void begin_accumulating_grad(VarNode& v, Stream& stream) {
  if (!Tape::begin_grad(v)) fill(v.grad, 0.0f, stream);
}

// dx (+)= dy, for functions whose gradient passes through unchanged.
void pass_through(const Var& x, const Tensor& dy, Stream& stream) {
  if (!x->requires_grad) return;
  if (Tape::begin_grad(*x)) {
    axpy(1.0f, dy, x->grad, stream);
  } else {
    x->grad.copy_from(dy, stream);
  }
}

}  // namespace

Var embedding(Tape& tape, const Var& table, const Tensor& ids) {
  LS_CHECK(table->value.ndim() == 2, "embedding: the table is ", table->value.describe(),
           "; expected [vocab, dim]");
  Stream& stream = tape.stream();
  Tensor out = Tensor::empty({ids.numel(), table->value.dim(1)}, DType::kF32, ids.device());
  ls::embedding(table->value, ids, out, stream);
  Var y = tape.output(std::move(out), {&table});
  tape.record(y, {table}, [table, ids, &stream](const Tensor& dy) {
    if (!table->requires_grad) return;
    begin_accumulating_grad(*table, stream);
    embedding_backward(dy, ids, table->grad, stream);
  });
  return y;
}

Var add_table_rows(Tape& tape, const Var& x, const Var& table, int64_t period) {
  const Tensor& xv = x->value;
  const int64_t dim = xv.ndim() == 2 ? xv.dim(1) : 0;
  LS_CHECK(dim > 0 && period > 0 && xv.dim(0) % period == 0 && table->value.ndim() == 2 &&
               table->value.dim(1) == dim && table->value.dim(0) >= period,
           "add_table_rows: x ", xv.describe(), " and table ", table->value.describe(),
           " with period ", period,
           ": expected x [rows, dim] with rows a multiple of the period "
           "and a table of at least `period` rows of dim");
  Stream& stream = tape.stream();
  // Rows of x grouped by period are the rows of a [rows/period, period*dim] matrix, to which the
  // table's first period rows add as one bias vector.
  const Shape grouped{xv.dim(0) / period, period * dim};
  Tensor y = like_f32(xv);
  y.copy_from(xv, stream);
  bias_add(y.view(0, grouped), table->value.view(0, {period * dim}), stream);
  Var out = tape.output(std::move(y), {&x, &table});
  tape.record(out, {x, table}, [x, table, grouped, &stream](const Tensor& dy) {
    pass_through(x, dy, stream);
    if (!table->requires_grad) return;
    begin_accumulating_grad(*table, stream);
    bias_grad(dy.view(0, grouped), table->grad.view(0, {grouped[1]}), true, stream);
  });
  return out;
}

namespace {
// The buffers a LayerNorm of x [rows, C] writes. In bf16 its consumers (linears) multiply a bf16
// copy of y: written in the same pass, and alone when the caller says products are all that read
// it (bf16_output: no f32 y at all).
LayerNormOutput layernorm_buffers(const Tape& tape, const Tensor& x, bool bf16_output) {
  const bool bf16 = tape.context().precision == Precision::kBF16;
  return {bf16 && bf16_output ? Tensor() : like_f32(x),
          bf16 ? Tensor::empty(x.shape(), DType::kBF16, x.device()) : Tensor(),
          Tensor::empty({x.dim(0)}, DType::kF32, x.device()),
          Tensor::empty({x.dim(0)}, DType::kF32, x.device())};
}
}  // namespace

Var layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta, float eps,
              bool bf16_output) {
  const Tensor& xv = x->value;
  LS_CHECK(xv.ndim() == 2, "layernorm: x is ", xv.describe(), "; expected [rows, channels]");
  LayerNormOutput out = layernorm_buffers(tape, xv, bf16_output);
  ls::layernorm(xv, gamma->value, beta->value, eps, out.y, out.mean, out.rstd, tape.stream(),
                out.y16);
  return record_layernorm(tape, x, gamma, beta, std::move(out));
}

std::pair<Var, Var> add_layernorm(Tape& tape, const Var& x, const Var& branch, const Var& gamma,
                                  const Var& beta, float eps, bool bf16_output) {
  const Tensor& xv = x->value;
  LS_CHECK(xv.ndim() == 2 && branch->value.shape() == xv.shape(), "add_layernorm: x is ",
           xv.describe(), " and branch ", branch->value.describe(),
           "; expected both [rows, channels]");
  LS_CHECK(branch->value.dtype() == DType::kF32, "add_layernorm: branch is ",
           branch->value.describe(), "; the residual stream adds f32 (nn::to_f32 widens it)");
  Tensor sum = like_f32(xv);
  LayerNormOutput out = layernorm_buffers(tape, xv, bf16_output);
  ls::add_layernorm(xv, branch->value, sum, gamma->value, beta->value, eps, out.y, out.mean,
                    out.rstd, tape.stream(), out.y16);
  // Recorded as add then layernorm, in that order: backward is theirs, unchanged (the norm's
  // input gradient accumulates into the sum's, which the add then hands on).
  Var residual = record_add(tape, std::move(sum), x, branch);
  return {residual, record_layernorm(tape, residual, gamma, beta, std::move(out))};
}

Var record_layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta,
                     LayerNormOutput computed) {
  Stream& stream = tape.stream();
  Tensor mean = std::move(computed.mean), rstd = std::move(computed.rstd);
  Var out = computed.y.defined() ? tape.output(std::move(computed.y), {&x, &gamma, &beta})
                                 : tape.output(computed.y16, {&x, &gamma, &beta});
  out->value16 = std::move(computed.y16);
  tape.record(out, {x, gamma, beta}, [x, gamma, beta, mean, rstd, &stream](const Tensor& dy) {
    const bool add = x->requires_grad && Tape::begin_grad(*x);
    for (const Var& p : {gamma, beta}) {  // first: it may be what gives them storage
      if (p->requires_grad) begin_accumulating_grad(*p, stream);
    }
    const Tensor dx = x->requires_grad ? x->grad : like_f32(x->value);
    const Tensor dgamma = gamma->requires_grad ? gamma->grad : like_f32(gamma->value);
    const Tensor dbeta = beta->requires_grad ? beta->grad : like_f32(beta->value);
    if (!gamma->requires_grad) fill(dgamma, 0.0f, stream);
    if (!beta->requires_grad) fill(dbeta, 0.0f, stream);
    layernorm_backward(x->value, gamma->value, mean, rstd, dy, dx, add, dgamma, dbeta, stream);
  });
  return out;
}

Var gelu_erf(Tape& tape, const Var& x) {
  Stream& stream = tape.stream();
  Tensor y = like_f32(x->value);
  ls::gelu_erf(x->value, y, stream);
  Var out = tape.output(std::move(y), {&x});
  tape.record(out, {x}, [x, &stream](const Tensor& dy) {
    if (!x->requires_grad) return;
    const bool add = Tape::begin_grad(*x);
    gelu_erf_backward(x->value, dy, x->grad, add, stream);
  });
  return out;
}

Var dropout(Tape& tape, const Var& x, float p, uint64_t site, int64_t row_len) {
  const ForwardContext& ctx = tape.context();
  if (!ctx.training || p == 0.0f) return x;
  LS_CHECK(p > 0.0f && p < 1.0f, "dropout probability ", p, " must be in [0, 1)");
  Stream& stream = tape.stream();
  tape.note_step_dependent();  // the mask is keyed by the step: no graph replay
  const uint64_t key = dropout_key(ctx.seed, ctx.step, site);
  const int64_t first_row = ctx.first_row;
  Tensor y = like_f32(x->value);
  ls::dropout(x->value, y, row_len, first_row, p, key, false, stream);
  Var out = tape.output(std::move(y), {&x});
  tape.record(out, {x}, [x, p, key, row_len, first_row, &stream](const Tensor& dy) {
    if (!x->requires_grad) return;
    const bool add = Tape::begin_grad(*x);
    ls::dropout(dy, x->grad, row_len, first_row, p, key, add, stream);  // the same mask
  });
  return out;
}

Var reshape(Tape& tape, const Var& x, const Shape& shape) {
  LS_CHECK(shape_numel(shape) == x->value.numel(), "reshape: ", x->value.describe(), " has ",
           x->value.numel(), " elements, not the ", shape_numel(shape), " of ", shape_str(shape));
  Stream& stream = tape.stream();
  Var out = tape.output(x->value.view(0, shape), {&x});
  tape.record(out, {x}, [x, &stream](const Tensor& dy) { pass_through(x, dy, stream); });
  return out;
}

Tensor padding_mask(Tape& tape, const Tensor& ids, int32_t pad_id) {
  Tensor valid = Tensor::empty(ids.shape(), DType::kI32, ids.device());
  token_mask(ids, pad_id, valid, tape.stream());
  return valid;
}

Var pool(Tape& tape, const Var& x, const Tensor& valid, Pooling pooling, int64_t batch,
         int64_t seq) {
  const ls::Pooling mode = pooling == Pooling::kFirst  ? ls::Pooling::kFirst
                           : pooling == Pooling::kMean ? ls::Pooling::kMean
                                                       : ls::Pooling::kLast;
  const Tensor& xv = x->value;
  LS_CHECK(xv.ndim() == 2 && xv.dim(0) == batch * seq, "pool: x is ", xv.describe(),
           "; expected [batch*seq, channels] = [", batch * seq, ", channels]");
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty({batch, xv.dim(1)}, DType::kF32, xv.device());
  ls::pool(xv, valid, mode, y, stream);
  Var out = tape.output(std::move(y), {&x});
  tape.record(out, {x}, [x, valid, mode, &stream](const Tensor& dy) {
    if (!x->requires_grad) return;
    const bool add = Tape::begin_grad(*x);
    pool_backward(dy, valid, mode, x->grad, add, stream);
  });
  return out;
}

}  // namespace ls::nn
