// The transformer MLP (nn::mlp of lockstep/nn/functional.h).
//
// Note [The MLP in two products]
// In a bf16 step with GELU's tanh form (GPT-2), the MLP is two products whose elementwise work
// rides in their epilogues (ops/gemm_epilogue.h; cuBLASLt on a GPU):
//   forward   pre = x W1^T + b1, h = gelu(pre)    one product, kBiasGelu: h and pre in bf16
//             y = h W2^T + b2                     one product, kBias: y in f32 (the residual's)
//   backward  dpre = (dy W2) * gelu'(pre)         one product, kDGelu: dpre in bf16
//             dW2 = dy^T h, dW1 = dpre^T x, dx = dpre W1; db2, db1 column sums of dy, dpre
// So the [rows, ffn] activations exist only in bf16, twice (pre for backward, h for the second
// product and dW2), where the unfused path kept pre and h in f32 and h again in bf16 (five
// bytes an element more), and neither bias + GELU nor its backward is a pass of its own. What
// changes in the numbers is what PyTorch's autocast does too: b1 is rounded to bf16 (autocast
// casts a Linear's bias with its weight), GELU and its gradient read the bf16 pre, and db1 sums
// the bf16 dpre that the products multiply, and db2 the bf16 dy they multiply (which the residual
// add hands over rounded, VarNode::bf16_grad_ok). The host computes the same
// (ops/host/gemm_epilogue.cpp), so a host bf16 run stays the GPU's numerics.
// Elsewhere (f32 or f16 steps, the erf form: cuBLASLt's GELU is the tanh form only, or an ffn
// that is not a multiple of 8) the MLP is nn::linear, nn::bias_gelu, nn::linear, as before.
#include <lockstep/nn/functional.h>
#include <lockstep/nn/parameter.h>
#include "engine/model/nn/bf16_values.h"
#include "ops/bias.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/gemm_epilogue.h"

namespace ls::nn {
namespace {

Var unfused(Tape& tape, const Var& x, const Var& fc_weight, const Var& fc_bias,
            const Var& proj_weight, const Var& proj_bias, bool erf_form) {
  // The MLP's first Linear feeds GELU alone, so its bias goes in with GELU (one pass less).
  Var h = bias_gelu(tape, linear(tape, x, fc_weight, nullptr), fc_bias, erf_form);
  return linear(tape, h, proj_weight, &proj_bias);
}

}  // namespace

Var mlp(Tape& tape, const Var& x, const Var& fc_weight, const Var& fc_bias, const Var& proj_weight,
        const Var& proj_bias, bool erf_form) {
  const Tensor& w1 = fc_weight->value;
  const Tensor& w2 = proj_weight->value;
  LS_CHECK(x->value.ndim() == 2 && w1.ndim() == 2 && w2.ndim() == 2 &&
               x->value.dim(1) == w1.dim(1) && w2.dim(1) == w1.dim(0),
           "mlp: input ", x->value.describe(), ", fc weight ", w1.describe(), " and proj weight ",
           w2.describe(), " do not fit (expected [rows, in], [ffn, in], [out, ffn])");
  const int64_t rows = x->value.dim(0), ffn = w1.dim(0), out_features = w2.dim(0);
  const bool fused = tape.context().precision == Precision::kBF16 && !erf_form && ffn % 8 == 0;
  if (!fused) return unfused(tape, x, fc_weight, fc_bias, proj_weight, proj_bias, erf_form);

  Stream& stream = tape.stream();
  const Device device = x->value.device();
  Tensor x16 = bf16_value_of(x, stream), w1_16 = bf16_value_of(fc_weight, stream);
  const Tensor b1_16 = bf16_value_of(fc_bias, stream), w2_16 = bf16_value_of(proj_weight, stream);
  const Tensor pre16 = Tensor::empty({rows, ffn}, DType::kBF16, device);
  const Tensor h16 = Tensor::empty({rows, ffn}, DType::kBF16, device);
  matmul_bf16_epilogue(x16, false, w1_16, true, GemmEpilogue::kBiasGelu, b1_16, pre16, h16, stream);
  Tensor y = Tensor::empty({rows, out_features}, DType::kF32, device);
  matmul_bf16_epilogue(h16, false, w2_16, true, GemmEpilogue::kBias, proj_bias->value, Tensor(), y,
                       stream);

  Var out = tape.output(std::move(y), {&x, &fc_weight, &fc_bias, &proj_weight, &proj_bias});
  out->bf16_grad_ok = true;  // backward multiplies dy in bf16 (db2 then sums the bf16 dy)
  // Backward keeps what it multiplies with: x16 for dW1, w1_16 for dx.
  if (!fc_weight->requires_grad) x16 = Tensor();
  if (!x->requires_grad) w1_16 = Tensor();
  tape.record(
      out, {x, fc_weight, fc_bias, proj_weight, proj_bias},
      [x, fc_weight, fc_bias, proj_weight, proj_bias, x16, w1_16, w2_16, pre16, h16,
       &stream](const Tensor& dy) {
        // Each gradient only when asked for (zero-bubble schedules ask for dx and the weights'
        // gradients in separate calls; each call that needs dpre computes it).
        const bool inner = x->requires_grad || fc_weight->requires_grad || fc_bias->requires_grad;
        if (!inner && !proj_weight->requires_grad && !proj_bias->requires_grad) return;
        const Tensor dy16 = dy.dtype() == DType::kBF16 ? dy : cast_to_bf16(dy, stream);
        if (proj_bias->requires_grad) {
          const bool add = Tape::begin_grad(*proj_bias);
          bias_grad(dy16, proj_bias->grad, add, stream);
        }
        if (proj_weight->requires_grad) {  // dW2 = dy^T h
          const bool add = Tape::begin_grad(*proj_weight);
          matmul_bf16(dy16, true, h16, false, proj_weight->grad, 1.0f, add ? 1.0f : 0.0f, stream);
        }
        if (!inner) return;
        // dpre = (dy W2) * gelu'(pre), in the product's epilogue.
        const Tensor dpre16 = Tensor::empty(pre16.shape(), DType::kBF16, pre16.device());
        matmul_bf16_epilogue(dy16, false, w2_16, false, GemmEpilogue::kDGelu, Tensor(), pre16,
                             dpre16, stream);
        if (fc_bias->requires_grad) {
          const bool add = Tape::begin_grad(*fc_bias);
          bias_grad(dpre16, fc_bias->grad, add, stream);
        }
        if (fc_weight->requires_grad) {  // dW1 = dpre^T x
          const bool add = Tape::begin_grad(*fc_weight);
          matmul_bf16(dpre16, true, x16, false, fc_weight->grad, 1.0f, add ? 1.0f : 0.0f, stream);
        }
        if (x->requires_grad) {  // dx = dpre W1
          const bool add = Tape::begin_grad(*x);
          matmul_bf16(dpre16, false, w1_16, false, x->grad, 1.0f, add ? 1.0f : 0.0f, stream);
        }
      });
  return out;
}

}  // namespace ls::nn
