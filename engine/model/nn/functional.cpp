// Differentiable functions (see lockstep/nn/functional.h).
// Every backward captures the Vars it needs by value, so their tensors live until it has run.
#include <lockstep/nn/functional.h>

#include <limits>

#include <lockstep/error.h>
#include <lockstep/nn/parameter.h>
#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/elementwise.h"
#include "engine/model/nn/bf16_values.h"
#include "engine/model/nn/like_f32.h"
#include "engine/model/nn/recorded_ops.h"
#include "ops/gemm.h"
#include "ops/gemm_epilogue.h"
#include "ops/pointwise_loss.h"
#include "ops/softmax_xent.h"

namespace ls::nn {

namespace {

// c = op(a) op(b) + beta c at `precision`; from a16 and b16, a and b cast to bf16, when the caller
// has them (precision kBF16: the same numbers, without rounding copies of a and b again).
void product(const Tensor& a, const Tensor& a16, bool trans_a, const Tensor& b, const Tensor& b16,
             bool trans_b, const Tensor& c, float beta, Precision precision, Stream& stream) {
  if (a16.defined()) {
    ls::matmul_bf16(a16, trans_a, b16, trans_b, c, 1.0f, beta, stream);
  } else {
    ls::matmul(a, trans_a, b, trans_b, c, 1.0f, beta, stream, precision);
  }
}

// The output Var of linear and linear_bf16_output, y = x W^T + b, with its backward recorded. In
// bf16 (cast_once) both products of backward take dy rounded to bf16, which a loss or an add may
// hand over so (out->bf16_grad_ok), and the bias gradient sums that bf16 dy (as under autocast),
// on every backend alike whoever rounded it. Backward keeps only the casts it multiplies with: x16
// for dW, w16 for dx.
Var linear_output(Tape& tape, Tensor y, const Var& x, const Var& weight, const Var* bias,
                  Tensor x16, Tensor w16, bool cast_once, Precision precision) {
  Var b = bias != nullptr ? *bias : nullptr;
  Var out = tape.output(std::move(y), {&x, &weight});
  if (b) out->requires_grad = out->requires_grad || (tape.recording() && b->requires_grad);
  out->bf16_grad_ok = cast_once;
  std::vector<Var> inputs{x, weight};
  if (b) inputs.push_back(b);
  if (!weight->requires_grad) x16 = Tensor();
  if (!x->requires_grad) w16 = Tensor();
  Stream& stream = tape.stream();
  tape.record(
      out, inputs, [x, weight, b, x16, w16, cast_once, precision, &stream](const Tensor& dy) {
        const bool products = x->requires_grad || weight->requires_grad;
        const bool bias_needs = b && b->requires_grad;
        const Tensor dy16 = dy.dtype() == DType::kBF16              ? dy
                            : cast_once && (products || bias_needs) ? cast_to_bf16(dy, stream)
                                                                    : Tensor();
        if (x->requires_grad) {  // dx = dy W
          const bool add = Tape::begin_grad(*x);
          product(dy, dy16, false, weight->value, w16, false, x->grad, add ? 1.0f : 0.0f, precision,
                  stream);
        }
        if (weight->requires_grad) {  // dW = dy^T x
          const bool add = Tape::begin_grad(*weight);
          const int64_t out = weight->value.dim(0);
          if (dy16.defined() && dy16.dim(1) > out) {  // padded columns: their gradient is zero
            matmul_bf16(dy16, true, x16, false, weight->grad, 1.0f, add ? 1.0f : 0.0f, stream,
                        /*a_columns=*/out);
          } else {
            product(dy, dy16, true, x->value, x16, false, weight->grad, add ? 1.0f : 0.0f,
                    precision, stream);
          }
        }
        if (bias_needs) {
          const bool add = Tape::begin_grad(*b);  // before reading b->grad: it may give it storage
          bias_grad(dy16.defined() ? dy16 : dy, b->grad, add, stream);
        }
      });
  return out;
}

}  // namespace

Var linear(Tape& tape, const Var& x, const Var& weight, const Var* bias) {
  const Tensor& w = weight->value;
  LS_CHECK(x->value.ndim() == 2 && w.ndim() == 2 && x->value.dim(1) == w.dim(1), "linear: input ",
           x->value.describe(), " does not fit weight ", w.describe(),
           " (expected input [rows, ", w.ndim() == 2 ? w.dim(1) : -1, "])");
  Stream& stream = tape.stream();
  const Precision precision = tape.context().precision;
  // In bf16 the input and the weight are cast once, and the casts serve the forward product and
  // both of backward's (as PyTorch's autocast keeps its casts for backward); dy is cast once for
  // dx and dW. Three casts where three matmul(..., kBF16) calls would round six operands. A
  // parameter's bf16 copy, when the engine keeps one, is that rounding already (Note [The bf16
  // copy of the weights], engine/model/nn/parameter_store.h): the weight is not rounded here.
  const bool cast_once = precision == Precision::kBF16;
  LS_CHECK(cast_once || x->value.dtype() == DType::kF32, "linear: input ", x->value.describe(),
           " is stored in ", dtype_name(x->value.dtype()),
           "; outside a bf16 step linear takes f32 "
           "(nn::to_f32 widens it)");
  // x itself when stored in bf16, or the bf16 copy its producer wrote: the same bits.
  Tensor x16 = cast_once ? bf16_value_of(x, stream) : Tensor();
  Tensor w16 = cast_once ? bf16_value_of(weight, stream) : Tensor();
  Tensor y = Tensor::empty({x->value.dim(0), w.dim(0)}, DType::kF32, x->value.device());
  if (cast_once && bias != nullptr && w.dim(1) > 0) {
    // The bias rides in the product's epilogue (cuBLASLt on a GPU): the same f32 sum as the
    // product followed by bias_add, without a pass over y.
    matmul_bf16_epilogue(x16, false, w16, true, GemmEpilogue::kBias, (*bias)->value, Tensor(), y,
                         stream);
  } else {
    product(x->value, x16, false, w, w16, true, y, 0.0f, precision, stream);
    if (bias != nullptr) bias_add(y, (*bias)->value, stream);
  }
  return linear_output(tape, std::move(y), x, weight, bias, std::move(x16), std::move(w16),
                       cast_once, precision);
}

Var linear_bf16_output(Tape& tape, const Var& x, const Var& weight, const Var* bias) {
  if (tape.context().precision != Precision::kBF16) return linear(tape, x, weight, bias);
  const Tensor& w = weight->value;
  LS_CHECK(x->value.ndim() == 2 && w.ndim() == 2 && x->value.dim(1) == w.dim(1) && w.dim(1) > 0,
           "linear_bf16_output: input ", x->value.describe(), " does not fit weight ", w.describe(),
           " (expected input [rows, ", w.ndim() == 2 ? w.dim(1) : -1, "])");
  Stream& stream = tape.stream();
  Tensor x16 = bf16_value_of(x, stream);
  // Note [The padded vocabulary]
  // GPT-2's 50,257 logits a row make a bf16 row of 100,514 bytes: rows 2-byte aligned, which
  // keeps cuBLASLt off its fast kernels in all three products of the head, and 50,257 is no
  // multiple of any tile. A weight with room for padded rows (the transformers' vocabulary
  // rounded up to a multiple of 128: 50,304) is multiplied through its padded bf16 copy, whose
  // extra rows are zero: the logits are [rows, 50,304], aligned, and their extra columns are then
  // set to -infinity, which softmax gives probability 0, so cross-entropy computes the loss of
  // the 50,257 and writes a zero gradient there. dx multiplies that gradient with the padded
  // weight (zeros times zeros); dW reads only its first 50,257 columns (matmul_bf16's a_columns),
  // into the [50,257, 768] gradient. The parameter, its f32 values, checkpoints and exports keep
  // 50,257 rows; only the engine's bf16 copy and the logits carry the padding.
  const Parameter* p = weight->parameter;
  const bool padded =
      bias == nullptr && p != nullptr && p->padded_value16.defined() && p->padded_rows > w.dim(0);
  Tensor w16 = padded ? p->padded_value16 : bf16_value_of(weight, stream);
  const Tensor b16 = bias != nullptr ? bf16_value_of(*bias, stream) : Tensor();
  Tensor y = Tensor::empty({x->value.dim(0), w16.dim(0)}, DType::kBF16, x->value.device());
  matmul_bf16_epilogue(x16, false, w16, true, bias ? GemmEpilogue::kBias : GemmEpilogue::kNone,
                       b16, Tensor(), y, stream);
  if (padded) fill_columns(y, w.dim(0), -std::numeric_limits<float>::infinity(), stream);
  return linear_output(tape, std::move(y), x, weight, bias, std::move(x16), std::move(w16),
                       /*cast_once=*/true, Precision::kBF16);
}

Var matmul(Tape& tape, const Var& a, const Var& b) {
  const Tensor& av = a->value;
  const Tensor& bv = b->value;
  LS_CHECK(av.ndim() == 2 && bv.ndim() == 2 && av.dim(1) == bv.dim(0), "matmul: ", av.describe(),
           " times ", bv.describe(), " does not fit (expected [m, k] times [k, n])");
  Stream& stream = tape.stream();
  Tensor c = Tensor::empty({av.dim(0), bv.dim(1)}, DType::kF32, av.device());
  const Precision precision = tape.context().precision;
  ls::matmul(av, false, bv, false, c, 1.0f, 0.0f, stream, precision);
  Var out = tape.output(std::move(c), {&a, &b});
  tape.record(out, {a, b}, [a, b, precision, &stream](const Tensor& dc) {
    if (a->requires_grad) {  // da = dc b^T
      const bool add = Tape::begin_grad(*a);
      ls::matmul(dc, false, b->value, true, a->grad, 1.0f, add ? 1.0f : 0.0f, stream, precision);
    }
    if (b->requires_grad) {  // db = a^T dc
      const bool add = Tape::begin_grad(*b);
      ls::matmul(a->value, true, dc, false, b->grad, 1.0f, add ? 1.0f : 0.0f, stream, precision);
    }
  });
  return out;
}

Var batched_matmul(Tape& tape, const Var& a, const Var& b) {
  const Tensor& av = a->value;
  const Tensor& bv = b->value;
  LS_CHECK(av.ndim() == 3 && bv.ndim() == 3 && av.dim(0) == bv.dim(0) && av.dim(2) == bv.dim(1),
           "batched_matmul: ", av.describe(), " times ", bv.describe(),
           " does not fit (expected [batch, m, k] times [batch, k, n])");
  Stream& stream = tape.stream();
  const int64_t batch = av.dim(0);
  Tensor c = Tensor::empty({batch, av.dim(1), bv.dim(2)}, DType::kF32, av.device());
  const Precision precision = tape.context().precision;
  matmul_batched(av, false, bv, false, c, batch, 1.0f, 0.0f, stream, precision);
  Var out = tape.output(std::move(c), {&a, &b});
  tape.record(out, {a, b}, [a, b, batch, precision, &stream](const Tensor& dc) {
    if (a->requires_grad) {  // da[i] = dc[i] b[i]^T
      const bool add = Tape::begin_grad(*a);
      matmul_batched(dc, false, b->value, true, a->grad, batch, 1.0f, add ? 1.0f : 0.0f, stream,
                     precision);
    }
    if (b->requires_grad) {  // db[i] = a[i]^T dc[i]
      const bool add = Tape::begin_grad(*b);
      matmul_batched(a->value, true, dc, false, b->grad, batch, 1.0f, add ? 1.0f : 0.0f, stream,
                     precision);
    }
  });
  return out;
}

namespace {
// Shared shape of relu and gelu: y = f(x), dx (+)= dy * f'(x).
template <typename Forward, typename Backward>
Var activation(Tape& tape, const Var& x, Forward forward, Backward backward) {
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty(x->value.shape(), DType::kF32, x->value.device());
  forward(x->value, y, stream);
  Var out = tape.output(std::move(y), {&x});
  tape.record(out, {x}, [x, backward, &stream](const Tensor& dy) {
    if (!x->requires_grad) return;
    const bool add = Tape::begin_grad(*x);
    backward(x->value, dy, x->grad, add, stream);
  });
  return out;
}
}  // namespace

Var relu(Tape& tape, const Var& x) {
  return activation(tape, x, [](auto&... a) { ls::relu(a...); },
                    [](auto&... a) { ls::relu_backward(a...); });
}

Var gelu(Tape& tape, const Var& x) {
  return activation(tape, x, [](auto&... a) { ls::gelu(a...); },
                    [](auto&... a) { ls::gelu_backward(a...); });
}

Var bias_gelu(Tape& tape, const Var& x, const Var& bias, bool erf_form) {
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty(x->value.shape(), DType::kF32, x->value.device());
  // In bf16 its consumer (an MLP's second linear) multiplies a bf16 copy: written in this pass.
  Tensor y16 = tape.context().precision == Precision::kBF16
                   ? Tensor::empty(x->value.shape(), DType::kBF16, x->value.device())
                   : Tensor();
  ls::bias_gelu(x->value, bias->value, y, erf_form, stream, y16);
  Var out = tape.output(std::move(y), {&x, &bias});
  out->value16 = std::move(y16);
  tape.record(out, {x, bias}, [x, bias, erf_form, &stream](const Tensor& dy) {
    if (!x->requires_grad && !bias->requires_grad) return;
    // dx and dbias come out of one pass; where x's gradient is already being accumulated (x
    // feeds another op too) or bias takes none, through scratch tensors.
    const bool add_dx = x->requires_grad && Tape::begin_grad(*x);
    const bool add_dbias = bias->requires_grad && Tape::begin_grad(*bias);
    const Tensor dx = x->requires_grad && !add_dx ? x->grad : like_f32(x->value);
    const Tensor dbias = bias->requires_grad ? bias->grad : like_f32(bias->value);
    bias_gelu_backward(x->value, bias->value, dy, dx, dbias, erf_form, add_dbias, stream);
    if (add_dx) axpy(1.0f, dx, x->grad, stream);
  });
  return out;
}

Var tanh(Tape& tape, const Var& x) {
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty(x->value.shape(), DType::kF32, x->value.device());
  ls::tanh(x->value, y, stream);
  Var out = tape.output(y, {&x});
  tape.record(out, {x}, [x, y, &stream](const Tensor& dy) {  // from the output: 1 - y^2
    if (!x->requires_grad) return;
    const bool add = Tape::begin_grad(*x);
    tanh_backward(y, dy, x->grad, add, stream);
  });
  return out;
}

Var add(Tape& tape, const Var& a, const Var& b) {
  LS_CHECK(a->value.shape() == b->value.shape(), "add: shapes differ: ", a->value.describe(),
           " and ", b->value.describe());
  Tensor y = Tensor::empty(a->value.shape(), DType::kF32, a->value.device());
  ls::add(a->value, b->value, y, tape.stream());
  return record_add(tape, std::move(y), a, b);
}

Var record_add(Tape& tape, Tensor y, const Var& a, const Var& b) {
  Stream& stream = tape.stream();
  Var out = tape.output(std::move(y), {&a, &b});
  tape.record(out, {a, b}, [a, b, &stream](const Tensor& dy) {
    bool handed_over = false;
    for (const Var& v : {a, b}) {
      if (!v->requires_grad) continue;
      // The first input with no gradient yet takes dy's buffer itself, not a copy (a residual
      // stream's add would otherwise copy its gradient twice): after this closure nothing reads
      // dy, so later contributions may add into it. Parameters keep their own storage.
      if (!handed_over && takes_handed_gradient(*v)) {
        v->grad = dy;
        v->grad_written = true;
        handed_over = true;
      } else if (takes_bf16_gradient(*v) && dy.dtype() == DType::kF32) {
        // The other input's only use is this add and its op multiplies the gradient in bf16 (a
        // bf16 step's attention projection or MLP): it gets dy rounded, one pass, where a copy
        // and then the op's own rounding were two.
        v->grad = cast_to_bf16(dy, stream);
        v->grad_written = true;
      } else if (Tape::begin_grad(*v)) {
        axpy(1.0f, dy, v->grad, stream);
      } else {
        v->grad.copy_from(dy, stream);
      }
    }
  });
  return out;
}

Var cross_entropy(Tape& tape, const Var& logits, const Tensor& labels, float grad_scale,
                  const Tensor& device_scale) {
  Stream& stream = tape.stream();
  const Tensor& z = logits->value;
  Tensor loss = Tensor::empty({1}, DType::kF32, z.device());
  const bool need_grad = tape.recording() && logits->requires_grad;
  // Note [A bf16 gradient for the logits]: in bf16, when the op that made the logits multiplies
  // their gradient in bf16 only (the LM head's linear), the kernel writes dlogits rounded to bf16
  // in the pass that computes it: the [rows, vocab] f32 gradient is never written, nor read back
  // to be rounded. The same numbers reach the products. Should the logits have another use whose
  // gradient adds to this one, the bf16 values are widened (exactly) to f32 first.
  // bf16 logits (nn::linear_bf16_output, ForwardContext::logits_in_bf16) are read once and, when
  // nothing else has used them, overwritten with their bf16 gradient: neither the [rows, vocab]
  // f32 logits nor a second buffer for dlogits exists.
  const bool bf16_logits = z.dtype() == DType::kBF16;
  const bool bf16_grad =
      bf16_logits || (tape.context().precision == Precision::kBF16 && logits->bf16_grad_ok);
  const bool in_place = bf16_logits && need_grad && logits->uses == 0;
  Tensor dlogits =
      !need_grad ? Tensor()
      : in_place ? z
                 : Tensor::empty(z.shape(), bf16_grad ? DType::kBF16 : DType::kF32, z.device());
  softmax_xent(z, labels, loss, dlogits, grad_scale, stream, device_scale);
  Var out = tape.output(std::move(loss), {&logits});
  tape.record(out, {logits}, [logits, dlogits, &stream](const Tensor&) mutable {
    // The gradient was computed in forward; the loss is the root, so no upstream factor.
    if (dlogits.dtype() == DType::kBF16 &&
        (logits->uses > 1 || logits->grad.defined() || !logits->bf16_grad_ok)) {
      Tensor widened = Tensor::empty(dlogits.shape(), DType::kF32, dlogits.device());
      cast(dlogits, widened, stream);
      dlogits = widened;
    }
    if (!logits->grad.defined()) {  // first contribution: hand over the buffer, no copy
      logits->grad = dlogits;
      logits->grad_written = true;
    } else if (Tape::begin_grad(*logits)) {
      axpy(1.0f, dlogits, logits->grad, stream);
    } else {
      logits->grad.copy_from(dlogits, stream);
    }
  });
  return out;
}

Var to_f32(Tape& tape, const Var& x) {
  const DType dtype = x->value.dtype();
  if (dtype == DType::kF32) return x;
  LS_CHECK(dtype == DType::kBF16, "to_f32: ", x->value.describe(), " holds ",
           dtype_name(dtype), " values; i32 inputs are ids (embedding), not values to widen");
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty(x->value.shape(), DType::kF32, x->value.device());
  cast(x->value, y, stream);
  if (!x->requires_grad) return tape.constant(std::move(y));
  // A bf16 activation (a bf16 step's): the gradient passes through unchanged (its grad is f32).
  Var out = tape.output(std::move(y), {&x});
  tape.record(out, {x}, [x, &stream](const Tensor& dy) {
    if (!x->requires_grad) return;
    if (Tape::begin_grad(*x)) {
      axpy(1.0f, dy, x->grad, stream);
    } else {
      x->grad.copy_from(dy, stream);
    }
  });
  return out;
}

Var scale(Tape& tape, const Var& x, float alpha) {
  Stream& stream = tape.stream();
  Tensor y = Tensor::empty(x->value.shape(), DType::kF32, x->value.device());
  fill(y, 0.0f, stream);
  axpy(alpha, x->value, y, stream);
  Var out = tape.output(std::move(y), {&x});
  tape.record(out, {x}, [x, alpha, &stream](const Tensor& dy) {
    if (!x->requires_grad) return;
    if (!Tape::begin_grad(*x)) fill(x->grad, 0.0f, stream);
    axpy(alpha, dy, x->grad, stream);
  });
  return out;
}

namespace {
// A pointwise loss summed to [1]; backward: dpred (+)= l'(pred, target) * dy (dy read on the
// device).
Var pointwise_loss(Tape& tape, PointwiseLoss kind, const Var& pred, const Tensor& target) {
  Stream& stream = tape.stream();
  Tensor sum = Tensor::empty({1}, DType::kF32, pred->value.device());
  pointwise_loss_sum(kind, pred->value, target, sum, stream);
  Var out = tape.output(std::move(sum), {&pred});
  tape.record(out, {pred}, [pred, target, kind, &stream](const Tensor& dy) {
    if (!pred->requires_grad) return;
    const bool add = Tape::begin_grad(*pred);
    pointwise_loss_backward(kind, pred->value, target, dy, pred->grad, add, stream);
  });
  return out;
}
}  // namespace

Var squared_error_sum(Tape& tape, const Var& pred, const Tensor& target) {
  return pointwise_loss(tape, PointwiseLoss::kSquaredError, pred, target);
}

Var bce_with_logits_sum(Tape& tape, const Var& logits, const Tensor& target) {
  return pointwise_loss(tape, PointwiseLoss::kBceWithLogits, logits, target);
}

}  // namespace ls::nn
