// Layer normalisation over the last dimension of f32 x [rows, cols] (any tensor of 2 or more
// dimensions is viewed as [numel / cols, cols]). Kernels: ops/host/layernorm.cpp,
// ops/cuda/layernorm.cu.
//
// layernorm: mean[r] = mean_c x[r, c], rstd[r] = 1 / sqrt(var_c x[r, c] + eps) (biased variance),
//   y = (x - mean) * rstd * gamma + beta; mean and rstd f32 [rows] are saved for the backward.
// add_layernorm: sum = a + b, then layernorm(sum), in one pass (the residual add fused).
// layernorm_backward: with xhat = (x - mean) * rstd and g = dy * gamma,
//   dx (+)= rstd * (g - mean_c(g) - xhat * mean_c(g * xhat))   (`accumulate` chooses += or =),
//   dgamma += sum_r dy * xhat, dbeta += sum_r dy (ALWAYS added; rows summed in row order).
// y may be x and dx may be dy (in place). Asynchronous in stream order.
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

struct LayerNormOps {
  // y = (x - mean) * rstd * gamma + beta per row; writes mean[rows], rstd[rows].
  // y16 (may be null): y rounded to bf16 as well, in the same pass (f32_to_bf16's bits).
  void (*layernorm)(const float* x, const float* gamma, const float* beta, int64_t rows,
                    int64_t cols, float eps, float* y, float* mean, float* rstd, uint16_t* y16,
                    Stream& stream) = nullptr;
  // sum = a + b, then layernorm of sum as above, in one pass: the residual add and the norm that
  // reads it. sum is written (the residual stream, and the norm's saved input), bit for bit
  // add's; y, y16, mean and rstd bit for bit layernorm's of it.
  void (*add_layernorm)(const float* a, const float* b, float* sum, const float* gamma,
                        const float* beta, int64_t rows, int64_t cols, float eps, float* y,
                        float* mean, float* rstd, uint16_t* y16, Stream& stream) = nullptr;
  // dx (+)= the input gradient; dgamma += sum_r dy*xhat, dbeta += sum_r dy in row order.
  void (*layernorm_backward)(const float* x, const float* gamma, const float* mean,
                             const float* rstd, const float* dy, int64_t rows, int64_t cols,
                             float* dx, bool accumulate, float* dgamma, float* dbeta,
                             Stream& stream) = nullptr;
};

namespace detail {
// x f32 with >= 2 dims; the [cols] vectors and [rows] statistics the op also takes.
inline void check_layernorm_x(const char* op, const char* name, const Tensor& x,
                              const Stream& stream) {
  op_check::tensor(op, name, x, DType::kF32, stream);
  LS_CHECK(x.ndim() >= 2 && x.dim(x.ndim() - 1) > 0, op, ": ", name, " is ", x.describe(),
           "; expected [rows, cols] (or [..., cols]) with cols > 0: reshape it to [-1, features]");
}
inline void check_layernorm_vector(const char* op, const char* name, const Tensor& v, int64_t n,
                                   const char* what, const Tensor& x, const Stream& stream) {
  op_check::tensor(op, name, v, DType::kF32, stream);
  LS_CHECK(v.ndim() == 1 && v.dim(0) == n, op, ": ", name, " is ", v.describe(), "; expected [", n,
           "], one value per ", what, " of x (", x.describe(), ")");
}
inline void check_same_shape(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  LS_CHECK(t.shape() == x.shape(), op, ": ", name, " is ", t.describe(),
           "; expected the shape of x (", x.describe(), ")");
}
// The forward's input x (named `name`), its [cols] parameters, [rows] statistics, eps and its
// outputs y (f32) and y16 (bf16), either of which may be undefined but not both.
inline void check_layernorm_forward(const char* op, const char* name, const Tensor& x,
                                    const Tensor& gamma, const Tensor& beta, float eps,
                                    const Tensor& y, const Tensor& mean, const Tensor& rstd,
                                    const Tensor& y16, const Stream& stream) {
  check_layernorm_x(op, name, x, stream);
  const int64_t cols = x.dim(x.ndim() - 1), rows = x.numel() / cols;
  check_layernorm_vector(op, "gamma", gamma, cols, "column", x, stream);
  check_layernorm_vector(op, "beta", beta, cols, "column", x, stream);
  check_layernorm_vector(op, "mean", mean, rows, "row", x, stream);
  check_layernorm_vector(op, "rstd", rstd, rows, "row", x, stream);
  LS_CHECK(y.defined() || y16.defined(), op, ": y and y16 are both undefined; pass y (f32), ",
           "y16 (bf16) or both");
  if (y.defined()) {
    op_check::tensor(op, "y", y, DType::kF32, stream);
    check_same_shape(op, "y", y, x);
  }
  LS_CHECK(eps > 0.0f, op, ": eps is ", eps, "; expected a small positive value, e.g. 1e-5");
  if (y16.defined()) {
    op_check::tensor(op, "y16", y16, DType::kBF16, stream);
    check_same_shape(op, "y16", y16, x);
  }
}
}  // namespace detail

// y16 (bf16, y's shape, or undefined): y rounded to bf16 too, written in the same pass, bit for
// bit cast(y): what a bf16 matrix product of y multiplies (nn::linear takes it as its operand).
// y may be undefined when y16 is not: the output in bf16 only (a bf16 step's activation).
inline void layernorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                      const Tensor& y, const Tensor& mean, const Tensor& rstd, Stream& stream,
                      const Tensor& y16 = Tensor()) {
  const char* op = "layernorm";
  detail::check_layernorm_forward(op, "x", x, gamma, beta, eps, y, mean, rstd, y16, stream);
  const int64_t cols = x.dim(x.ndim() - 1), rows = x.numel() / cols;
  op_entry(&LayerNormOps::layernorm, op, stream,
           [&] {
             return OpLaunches{
                 ledger::moves("layernorm_kernel", {&x, &gamma, &beta, &y, &mean, &rstd, &y16})};
           })(x.f32(), gamma.f32(), beta.f32(), rows, cols, eps, y.defined() ? y.f32() : nullptr,
              mean.f32(), rstd.f32(), y16.defined() ? y16.bf16() : nullptr, stream);
}

// sum = a + b and layernorm(sum) in one pass (LayerNormOps::add_layernorm): a, b and sum of one
// shape, sum overlapping neither; y (or y16) as layernorm's, overlapping none of a, b and sum.
inline void add_layernorm(const Tensor& a, const Tensor& b, const Tensor& sum, const Tensor& gamma,
                          const Tensor& beta, float eps, const Tensor& y, const Tensor& mean,
                          const Tensor& rstd, Stream& stream, const Tensor& y16 = Tensor()) {
  const char* op = "add_layernorm";
  detail::check_layernorm_forward(op, "a", a, gamma, beta, eps, y, mean, rstd, y16, stream);
  for (auto [name, t] : {std::pair{"b", &b}, {"sum", &sum}}) {
    op_check::tensor(op, name, *t, DType::kF32, stream);
    detail::check_same_shape(op, name, *t, a);
  }
  const int64_t cols = a.dim(a.ndim() - 1), rows = a.numel() / cols;
  for (const Tensor* out : {&sum, &y, &y16}) {
    for (const Tensor* in : {&a, &b}) {
      LS_CHECK(!out->defined() || !op_check::overlaps(*out, *in), op, ": an output (",
               out->describe(), ") overlaps an input (", in->describe(), "); write to new tensors");
    }
  }
  for (const Tensor* out : {&y, &y16}) {
    LS_CHECK(!out->defined() || !op_check::overlaps(sum, *out), op, ": sum (", sum.describe(),
             ") overlaps the norm's output; write them to separate tensors");
  }
  op_entry(&LayerNormOps::add_layernorm, op, stream,
           [&] {
             return OpLaunches{ledger::moves(
                 "layernorm_kernel", {&a, &b, &sum, &gamma, &beta, &y, &mean, &rstd, &y16})};
           })(a.f32(), b.f32(), sum.f32(), gamma.f32(), beta.f32(), rows, cols, eps,
              y.defined() ? y.f32() : nullptr, mean.f32(), rstd.f32(),
              y16.defined() ? y16.bf16() : nullptr, stream);
}

inline void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                               bool accumulate, const Tensor& dgamma, const Tensor& dbeta,
                               Stream& stream) {
  const char* op = "layernorm_backward";
  detail::check_layernorm_x(op, "x", x, stream);
  const int64_t cols = x.dim(x.ndim() - 1), rows = x.numel() / cols;
  detail::check_layernorm_vector(op, "gamma", gamma, cols, "column", x, stream);
  detail::check_layernorm_vector(op, "mean", mean, rows, "row", x, stream);
  detail::check_layernorm_vector(op, "rstd", rstd, rows, "row", x, stream);
  op_check::tensor(op, "dy", dy, DType::kF32, stream);
  detail::check_same_shape(op, "dy", dy, x);
  op_check::tensor(op, "dx", dx, DType::kF32, stream);
  detail::check_same_shape(op, "dx", dx, x);
  detail::check_layernorm_vector(op, "dgamma", dgamma, cols, "column", x, stream);
  detail::check_layernorm_vector(op, "dbeta", dbeta, cols, "column", x, stream);
  op_entry(&LayerNormOps::layernorm_backward, op, stream,
           [&] {
             // dgamma and dbeta in two passes (ops/cuda/column_sums.cuh), then dx row by row.
             return OpLaunches{
                 ledger::moves("layernorm_param_grad_kernel", {&x, &dy, &mean, &rstd}),
                 ledger::moves("layernorm_param_grad_finish_kernel", {&dgamma, &dbeta}),
                 ledger::moves("layernorm_input_grad_kernel",
                               {&x, &dy, &gamma, &mean, &rstd, &dx, accumulate ? &dx : nullptr})};
           })(x.f32(), gamma.f32(), mean.f32(), rstd.f32(), dy.f32(), rows, cols, dx.f32(),
              accumulate, dgamma.f32(), dbeta.f32(), stream);
}

}  // namespace ls
