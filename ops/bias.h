// Bias of a dense layer on 2-D tensors [rows, cols], f32 (bias_grad's dy may be bf16, a bf16
// step's gradient). Kernels: ops/host/bias.cpp, ops/cuda/bias.cu.
//
// bias_add:  y[r, c] += bias[c]          (in place on y; bias is [cols])
// bias_grad: dbias[c] (+)= sum_r dy[r, c] (rows summed in order: bitwise reproducible)
// Asynchronous in stream order; every tensor must be on the stream's device. Bad arguments raise
// ls::Error at the call.
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

struct BiasOps {
  // y[r,c] += bias[c]
  void (*bias_add)(float* y, const float* bias, int64_t rows, int64_t cols,
                   Stream& stream) = nullptr;
  // dbias[c] (+)= sum over r of dy[r,c], summed in row order.
  void (*bias_grad)(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
                    Stream& stream) = nullptr;
  // bias_grad of a bf16 dy (its bits), each element widened exactly to f32 and summed as above.
  void (*bias_grad_bf16)(const uint16_t* dy, float* dbias, int64_t rows, int64_t cols,
                         bool accumulate, Stream& stream) = nullptr;
};

namespace detail {
// `matrix` is f32 [rows, cols] and `vec` f32 [cols], both on the stream's device.
inline void check_bias(const char* op, const char* matrix_name, const Tensor& matrix,
                       const char* vec_name, const Tensor& vec, const Stream& stream,
                       DType matrix_dtype = DType::kF32) {
  op_check::tensor(op, matrix_name, matrix, matrix_dtype, stream);
  op_check::tensor(op, vec_name, vec, DType::kF32, stream);
  op_check::matrix(op, matrix_name, matrix, "[rows, cols]: reshape it to [-1, features]");
  LS_CHECK(vec.ndim() == 1 && vec.dim(0) == matrix.dim(1), op, ": ", vec_name, " is ",
           vec.describe(), "; expected [", matrix.dim(1), "], one value per column of ",
           matrix_name, " (", matrix.describe(), ")");
}
}  // namespace detail

inline void bias_add(const Tensor& y, const Tensor& bias, Stream& stream) {
  detail::check_bias("bias_add", "y", y, "bias", bias, stream);
  op_entry(&BiasOps::bias_add, "bias_add", stream, [&] {
    return OpLaunches{ledger::moves("bias_add_kernel", {&y, &y, &bias})};
  })(y.f32(), bias.f32(), y.dim(0), y.dim(1), stream);
}

// accumulate: dbias += sum (gradient accumulation); otherwise dbias = sum. dy is f32 or bf16 (a
// bf16 step's gradient as the products took it: what PyTorch's autocast sums for a bias too).
inline void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, Stream& stream) {
  const bool bf16 = dy.dtype() == DType::kBF16;
  detail::check_bias("bias_grad", "dy", dy, "dbias", dbias, stream,
                     bf16 ? DType::kBF16 : DType::kF32);
  // Two passes (ops/cuda/column_sums.cuh): tiles of rows, then the tiles' sums.
  const auto describe = [&] {
    return OpLaunches{ledger::moves("bias_grad_tile_kernel", {&dy}),
                      ledger::moves("bias_grad_finish_kernel", {&dbias})};
  };
  if (bf16) {
    op_entry(&BiasOps::bias_grad_bf16, "bias_grad", stream, describe)(
        dy.bf16(), dbias.f32(), dy.dim(0), dy.dim(1), accumulate, stream);
    return;
  }
  op_entry(&BiasOps::bias_grad, "bias_grad", stream, describe)(dy.f32(), dbias.f32(), dy.dim(0),
                                                               dy.dim(1), accumulate, stream);
}

}  // namespace ls
