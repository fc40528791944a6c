// Sequence pooling for classification heads: one vector per example out of its token vectors,
// honouring padding, and the padding mask itself. Kernels: ops/host/pooling.cpp,
// ops/cuda/pooling.cu. f32 data, i32 masks (1 real token, 0 padding); asynchronous in stream
// order; deterministic (kMean sums over t in order). Outputs must not overlap inputs.
//
// pool: x [B, T, C] (or [B*T, C]) -> y [B, C]. kLast: x at the LAST t with valid == 1 (not
// t = T-1 unless it is real); kFirst: x at the FIRST t with valid == 1 (t = 0 for right-padded
// rows); kMean: the mean over valid t. A row with no valid token gives y = 0.
// pool_backward: dx (+)= dy scattered by the same rule; positions not pooled get 0 (or +0).
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

enum class Pooling { kLast, kFirst, kMean };

inline const char* pooling_name(Pooling mode) {
  switch (mode) {
    case Pooling::kLast: return "last";
    case Pooling::kFirst: return "first";
    case Pooling::kMean: return "mean";
  }
  return "?";
}

struct PoolingOps {
  // y[b, :] = pooled x[b, :, :] (x [batch, t, c], valid [batch, t]) by `mode`; no valid t: 0.
  void (*pool)(const float* x, const int32_t* valid, int64_t batch, int64_t t, int64_t c,
               Pooling mode, float* y, Stream& stream) = nullptr;
  // dx[b, t, :] (+)= the share of dy[b, :] that position t got in pool (0 if none).
  void (*pool_backward)(const float* dy, const int32_t* valid, int64_t batch, int64_t t, int64_t c,
                        Pooling mode, float* dx, bool accumulate, Stream& stream) = nullptr;
  // valid[i] = tokens[i] != pad_id ? 1 : 0
  void (*token_mask)(const int32_t* tokens, int64_t n, int32_t pad_id, int32_t* valid,
                     Stream& stream) = nullptr;
};

namespace detail {
struct PoolDims {
  int64_t batch, t, c;
};

// x ([B, T, C] or [B*T, C]) against valid [B, T] and y [B, C]; x_name / y_name name them.
inline PoolDims check_pool(const char* op, const Tensor& x, const char* x_name, const Tensor& valid,
                           const Tensor& y, const char* y_name, const Stream& stream) {
  op_check::tensor(op, x_name, x, DType::kF32, stream);
  op_check::tensor(op, "valid", valid, DType::kI32, stream);
  op_check::tensor(op, y_name, y, DType::kF32, stream);
  LS_CHECK(valid.ndim() == 2, op, ": valid is ", valid.describe(),
           "; expected a 2-D [batch, T] mask (1 real token, 0 padding)");
  const int64_t b = valid.dim(0), t = valid.dim(1);
  LS_CHECK(y.ndim() == 2 && y.dim(0) == b, op, ": ", y_name, " is ", y.describe(), "; expected [",
           b, ", C] (one vector per row of valid, ", valid.describe(), ")");
  const int64_t c = y.dim(1);
  const bool x_ok = (x.ndim() == 3 && x.dim(0) == b && x.dim(1) == t && x.dim(2) == c) ||
                    (x.ndim() == 2 && x.dim(0) == b * t && x.dim(1) == c);
  LS_CHECK(x_ok, op, ": ", x_name, " is ", x.describe(), "; expected [", b, ", ", t, ", ", c,
           "] or [", b * t, ", ", c, "] for valid ", valid.describe(), " and ", y_name, " ",
           y.describe());
  LS_CHECK(!op_check::overlaps(x, y), op, ": ", x_name, " and ", y_name,
           " overlap; pass separate tensors");
  return {b, t, c};
}
}  // namespace detail

inline void pool(const Tensor& x, const Tensor& valid, Pooling mode, const Tensor& y,
                 Stream& stream) {
  const detail::PoolDims d = detail::check_pool("pool", x, "x", valid, y, "y", stream);
  op_entry(&PoolingOps::pool, "pool", stream, [&] {
    return OpLaunches{ledger::moves("pool_kernel", {&x, &valid, &y})};
  })(x.f32(), valid.i32(), d.batch, d.t, d.c, mode, y.f32(), stream);
}

inline void pool_backward(const Tensor& dy, const Tensor& valid, Pooling mode, const Tensor& dx,
                          bool accumulate, Stream& stream) {
  const detail::PoolDims d = detail::check_pool("pool_backward", dx, "dx", valid, dy, "dy", stream);
  op_entry(&PoolingOps::pool_backward, "pool_backward", stream, [&] {
    return OpLaunches{ledger::moves("pool_backward_kernel", {&dy, &valid, &dx})};
  })(dy.f32(), valid.i32(), d.batch, d.t, d.c, mode, dx.f32(), accumulate, stream);
}

// valid[i] = (tokens[i] != pad_id) ? 1 : 0; tokens and valid i32 with the same element count.
inline void token_mask(const Tensor& tokens, int32_t pad_id, const Tensor& valid, Stream& stream) {
  op_check::tensor("token_mask", "tokens", tokens, DType::kI32, stream);
  op_check::tensor("token_mask", "valid", valid, DType::kI32, stream);
  op_check::same_numel("token_mask", "valid", valid, "tokens", tokens);
  LS_CHECK(valid.data() == tokens.data() || !op_check::overlaps(valid, tokens),
           "token_mask: valid partly overlaps tokens; pass tokens itself or a separate tensor");
  op_entry(&PoolingOps::token_mask, "token_mask", stream, [&] {
    return OpLaunches{ledger::moves("token_mask_kernel", {&tokens, &valid})};
  })(tokens.i32(), tokens.numel(), pad_id, valid.i32(), stream);
}

}  // namespace ls
