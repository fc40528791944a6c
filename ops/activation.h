// Activations on f32 tensors of equal element count (shapes may differ). An output may be the
// same tensor as an input (in place), never a partial overlap. Kernels: ops/host/activation.cpp,
// ops/cuda/activation.cu.
//
// relu(x) = max(x, 0); relu_backward: dx (+)= dy * (x > 0).
// gelu: tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); gelu_backward uses its exact
// derivative. gelu_erf: the exact form 0.5 x (1 + erf(x / sqrt 2)) (BERT/GPT-2's nn.GELU()),
// gelu_erf_backward: dx (+)= dy * (0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi)).
// tanh; tanh_backward: dx (+)= dy * (1 - y^2) from the forward's output y (BERT's pooler).
// `accumulate` adds into dx instead of overwriting it. Asynchronous in stream order.
// bias_gelu: y = gelu(x + bias) on [rows, cols] x and [cols] bias, either form, in one pass over
// memory instead of bias_add's and gelu's two (the MLP's first Linear, whose output feeds GELU
// alone); bias_gelu_backward: dx = dy * gelu'(x + bias) and dbias (+)= the column sums of dx, also
// in one pass on the host. Bit for bit bias_add, then gelu (gelu_backward, then bias_grad).
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

struct ActivationOps {
  // y = max(x, 0)
  void (*relu)(const float* x, float* y, int64_t n, Stream& stream) = nullptr;
  // dx (+)= dy * (x > 0)
  void (*relu_backward)(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                        Stream& stream) = nullptr;
  // y = gelu(x), tanh form
  void (*gelu)(const float* x, float* y, int64_t n, Stream& stream) = nullptr;
  // dx (+)= dy * gelu'(x)
  void (*gelu_backward)(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                        Stream& stream) = nullptr;
  // y = 0.5 x (1 + erf(x / sqrt 2))
  void (*gelu_erf)(const float* x, float* y, int64_t n, Stream& stream) = nullptr;
  // dx (+)= dy * gelu_erf'(x)
  void (*gelu_erf_backward)(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                            Stream& stream) = nullptr;
  // y = tanh(x)
  void (*tanh)(const float* x, float* y, int64_t n, Stream& stream) = nullptr;
  // dx (+)= dy * (1 - y^2), from the forward's OUTPUT y
  void (*tanh_backward)(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                        Stream& stream) = nullptr;
  // y[r, c] = gelu(x[r, c] + bias[c]), the erf form when `erf`, else the tanh form; y16 (may be
  // null) gets y rounded to bf16 too (f32_to_bf16's bits), in the same pass.
  void (*bias_gelu)(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                    bool erf, uint16_t* y16, Stream& stream) = nullptr;
  // dx[r, c] = dy[r, c] * gelu'(x[r, c] + bias[c]) (overwritten); dbias[c] (+)= sum over r of
  // dx[r, c], in row order (as bias_grad sums)
  void (*bias_gelu_backward)(const float* x, const float* bias, const float* dy, float* dx,
                             float* dbias, int64_t rows, int64_t cols, bool erf,
                             bool accumulate_dbias, Stream& stream) = nullptr;
};

namespace detail {
inline void check_activation(const char* op, const Tensor& x, const Tensor& y,
                             const char* y_name, const Stream& stream) {
  op_check::tensor(op, "x", x, DType::kF32, stream);
  op_check::tensor(op, y_name, y, DType::kF32, stream);
  op_check::same_numel(op, y_name, y, "x", x);
}
inline void check_activation_backward(const char* op, const Tensor& x, const Tensor& dy,
                                      const Tensor& dx, const Stream& stream) {
  check_activation(op, x, dy, "dy", stream);
  check_activation(op, x, dx, "dx", stream);
}
// x [rows, cols] and bias [cols], f32 on the stream's device, x 2-D.
inline void check_bias_activation(const char* op, const Tensor& x, const Tensor& bias,
                                  const Stream& stream) {
  op_check::tensor(op, "x", x, DType::kF32, stream);
  op_check::tensor(op, "bias", bias, DType::kF32, stream);
  op_check::matrix(op, "x", x, "[rows, cols]: reshape it to [-1, features]");
  LS_CHECK(bias.ndim() == 1 && bias.dim(0) == x.dim(1), op, ": bias is ", bias.describe(),
           "; expected [", x.dim(1), "], one value per column of x (", x.describe(), ")");
}
}  // namespace detail

inline void relu(const Tensor& x, const Tensor& y, Stream& stream) {
  detail::check_activation("relu", x, y, "y", stream);
  op_entry(&ActivationOps::relu, "relu", stream, [&] {
    return OpLaunches{ledger::moves("relu_kernel", {&x, &y})};
  })(x.f32(), y.f32(), x.numel(), stream);
}

inline void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                          Stream& stream) {
  detail::check_activation_backward("relu_backward", x, dy, dx, stream);
  op_entry(&ActivationOps::relu_backward, "relu_backward", stream, [&] {
    return OpLaunches{ledger::moves("relu_backward_kernel", {&x, &dy, &dx})};
  })(x.f32(), dy.f32(), dx.f32(), x.numel(), accumulate, stream);
}

inline void gelu(const Tensor& x, const Tensor& y, Stream& stream) {
  detail::check_activation("gelu", x, y, "y", stream);
  op_entry(&ActivationOps::gelu, "gelu", stream, [&] {
    return OpLaunches{ledger::moves("gelu_kernel", {&x, &y})};
  })(x.f32(), y.f32(), x.numel(), stream);
}

inline void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                          Stream& stream) {
  detail::check_activation_backward("gelu_backward", x, dy, dx, stream);
  op_entry(&ActivationOps::gelu_backward, "gelu_backward", stream, [&] {
    return OpLaunches{ledger::moves("gelu_backward_kernel", {&x, &dy, &dx})};
  })(x.f32(), dy.f32(), dx.f32(), x.numel(), accumulate, stream);
}

inline void gelu_erf(const Tensor& x, const Tensor& y, Stream& stream) {
  detail::check_activation("gelu_erf", x, y, "y", stream);
  op_entry(&ActivationOps::gelu_erf, "gelu_erf", stream, [&] {
    return OpLaunches{ledger::moves("gelu_erf_kernel", {&x, &y})};
  })(x.f32(), y.f32(), x.numel(), stream);
}

inline void gelu_erf_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                              Stream& stream) {
  detail::check_activation_backward("gelu_erf_backward", x, dy, dx, stream);
  op_entry(&ActivationOps::gelu_erf_backward, "gelu_erf_backward", stream, [&] {
    return OpLaunches{ledger::moves("gelu_erf_backward_kernel", {&x, &dy, &dx})};
  })(x.f32(), dy.f32(), dx.f32(), x.numel(), accumulate, stream);
}

// tanh (BERT's pooler); its backward takes the forward's output y.
inline void tanh(const Tensor& x, const Tensor& y, Stream& stream) {
  detail::check_activation("tanh", x, y, "y", stream);
  op_entry(&ActivationOps::tanh, "tanh", stream, [&] {
    return OpLaunches{ledger::moves("tanh_kernel", {&x, &y})};
  })(x.f32(), y.f32(), x.numel(), stream);
}

inline void tanh_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool accumulate,
                          Stream& stream) {
  detail::check_activation_backward("tanh_backward", y, dy, dx, stream);
  op_entry(&ActivationOps::tanh_backward, "tanh_backward", stream, [&] {
    return OpLaunches{ledger::moves("tanh_backward_kernel", {&y, &dy, &dx})};
  })(y.f32(), dy.f32(), dx.f32(), y.numel(), accumulate, stream);
}

// y = gelu(x + bias), bias broadcast over the rows of x; erf picks the erf form (gelu_erf).
// y may be x (in place). Bit for bit bias_add(x, bias) then gelu / gelu_erf.
// y16 (bf16, y's shape, or undefined): y rounded to bf16 too, in the same pass: bit for bit
// cast(y), the operand a bf16 matrix product of y takes.
inline void bias_gelu(const Tensor& x, const Tensor& bias, const Tensor& y, bool erf,
                      Stream& stream, const Tensor& y16 = Tensor()) {
  detail::check_bias_activation("bias_gelu", x, bias, stream);
  detail::check_activation("bias_gelu", x, y, "y", stream);
  if (y16.defined()) {
    op_check::tensor("bias_gelu", "y16", y16, DType::kBF16, stream);
    op_check::same_numel("bias_gelu", "y16", y16, "x", x);
  }
  op_entry(&ActivationOps::bias_gelu, "bias_gelu", stream, [&] {
    return OpLaunches{ledger::moves("bias_gelu_kernel", {&x, &bias, &y, &y16})};
  })(x.f32(), bias.f32(), y.f32(), x.dim(0), x.dim(1), erf, y16.defined() ? y16.bf16() : nullptr,
     stream);
}

// dx = dy * gelu'(x + bias) (overwritten; dx may be dy) and dbias (+)= its column sums: bit for
// bit gelu_backward on bias_add(x, bias), then bias_grad(dx). dbias must not overlap the others.
inline void bias_gelu_backward(const Tensor& x, const Tensor& bias, const Tensor& dy,
                               const Tensor& dx, const Tensor& dbias, bool erf,
                               bool accumulate_dbias, Stream& stream) {
  constexpr const char* op = "bias_gelu_backward";
  detail::check_bias_activation(op, x, bias, stream);
  detail::check_activation_backward(op, x, dy, dx, stream);
  op_check::tensor(op, "dbias", dbias, DType::kF32, stream);
  LS_CHECK(dbias.shape() == bias.shape(), op, ": dbias is ", dbias.describe(),
           "; expected the shape of bias (", bias.describe(), ")");
  for (const Tensor* other : {&x, &dy, &dx, &bias}) {
    LS_CHECK(!op_check::overlaps(dbias, *other), op, ": dbias (", dbias.describe(),
             ") overlaps an input or dx; give it its own tensor");
  }
  op_entry(&ActivationOps::bias_gelu_backward, op, stream,
           [&] {
             // dx in one kernel, then bias_grad's two passes over it (ops/cuda/activation.cu).
             return OpLaunches{ledger::moves("bias_gelu_backward_kernel", {&x, &bias, &dy, &dx}),
                               ledger::moves("bias_grad_tile_kernel", {&dx}),
                               ledger::moves("bias_grad_finish_kernel", {&dbias})};
           })(x.f32(), bias.f32(), dy.f32(), dx.f32(), dbias.f32(), x.dim(0), x.dim(1), erf,
              accumulate_dbias, stream);
}

}  // namespace ls
