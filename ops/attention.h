// The attention ops around the two batched GEMMs of multi-head attention (ops/gemm.h's
// matmul_batched): the masked, scaled row softmax of the scores and its backward, and the layout
// changes between token-major [B, T, G, H, D] activations and head-major [G, B, H, T, D] blocks.
// Kernels: ops/host/attention.cpp, ops/cuda/attention.cu. f32 data, i32 masks; asynchronous in
// stream order; deterministic (every sum in a fixed order). attention_softmax may run in place
// (probs == scores), attention_softmax_backward may write over dprobs; split_heads and
// merge_heads need separate tensors. Bad arguments raise ls::Error at the call.
#pragma once

#include <array>
#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

struct AttentionOps {
  // For each of the rows * t query rows (row r of batch-head r / t): probs = softmax over keys j
  // of scale * scores, key j masked (prob 0) when (causal && j > i) or (key_valid != null &&
  // key_valid[(r / heads) * t + j] == 0); a row with every key masked is all 0. In place allowed.
  void (*attention_softmax)(const float* scores, const int32_t* key_valid, int64_t batch_heads,
                            int64_t heads, int64_t t, bool causal, float scale, float* probs,
                            Stream& stream) = nullptr;
  // Per row of `cols`: dscores = scale * probs * (dprobs - sum_j dprobs * probs); may be dprobs.
  // causal (rows = batch_heads * cols): row r's keys j > r % cols get 0 and dprobs there is not
  // read (causal_gemm.h leaves it unwritten).
  void (*attention_softmax_backward)(const float* probs, const float* dprobs, int64_t rows,
                                     int64_t cols, bool causal, float scale, float* dscores,
                                     Stream& stream) = nullptr;
  // y[g, b, h, t, d] (+)= x[b, t, g, h, d]; dims = {B, T, G, H, D}.
  void (*split_heads)(const float* x, float* y, std::array<int64_t, 5> dims, bool accumulate,
                      Stream& stream) = nullptr;
  // y[g, b, h, t, d] = bf16(x[b, t, g, h, d]) (round to nearest even, ls::f32_to_bf16's bits).
  void (*split_heads_bf16)(const float* x, uint16_t* y, std::array<int64_t, 5> dims,
                           Stream& stream) = nullptr;
  // x[b, t, g, h, d] (+)= y[g, b, h, t, d]; dims = {B, T, G, H, D}.
  void (*merge_heads)(const float* y, float* x, std::array<int64_t, 5> dims, bool accumulate,
                      Stream& stream) = nullptr;
};

namespace detail {
// probs (or dscores) is `in` itself or does not touch it.
inline void check_same_or_disjoint(const char* op, const char* name, const Tensor& out,
                                   const char* in_name, const Tensor& in) {
  LS_CHECK(out.data() == in.data() || !op_check::overlaps(out, in), op, ": ", name, " (",
           out.describe(), ") partly overlaps ", in_name, "; pass ", in_name,
           " itself (in place) or a separate tensor");
}

inline void check_scores(const char* op, const char* name, const Tensor& t, const Stream& stream) {
  op_check::tensor(op, name, t, DType::kF32, stream);
  LS_CHECK(t.ndim() == 3 && t.dim(1) == t.dim(2), op, ": ", name, " is ", t.describe(),
           "; expected a 3-D [batch * heads, T, T] tensor (query rows, key columns)");
}

inline void check_heads_layout(const char* op, const Tensor& x, const Tensor& y,
                               const std::array<int64_t, 5>& dims, const Stream& stream,
                               DType y_dtype = DType::kF32) {
  op_check::tensor(op, "x", x, DType::kF32, stream);
  op_check::tensor(op, "y", y, y_dtype, stream);
  int64_t n = 1;
  for (int64_t d : dims) {
    LS_CHECK(d >= 0, op, ": dims {", dims[0], ", ", dims[1], ", ", dims[2], ", ", dims[3], ", ",
             dims[4], "} has a negative size; expected {B, T, G, H, D}");
    n *= d;
  }
  for (auto [name, t] : {std::pair{"x", &x}, {"y", &y}}) {
    LS_CHECK(t->numel() == n, op, ": ", name, " is ", t->describe(), "; expected ", n,
             " elements for dims {B, T, G, H, D} = {", dims[0], ", ", dims[1], ", ", dims[2], ", ",
             dims[3], ", ", dims[4], "}");
  }
  LS_CHECK(!op_check::overlaps(x, y), op, ": x (", x.describe(), ") and y (", y.describe(),
           ") overlap; a layout change needs separate tensors");
}
}  // namespace detail

// probs = softmax_row(scale * scores + mask), scores/probs [batch * heads, T, T]; key j is
// masked for query i when (causal && j > i) or (key_valid defined && key_valid[b, j] == 0),
// b = row's batch-head / heads. key_valid: i32 [batch, T] or an undefined Tensor. A row with
// every key masked gets probs 0. probs may be scores (in place).
inline void attention_softmax(const Tensor& scores, const Tensor& key_valid, int64_t heads,
                              bool causal, float scale, const Tensor& probs, Stream& stream) {
  constexpr const char* op = "attention_softmax";
  detail::check_scores(op, "scores", scores, stream);
  LS_CHECK(heads > 0 && scores.dim(0) % heads == 0, op, ": heads = ", heads,
           " does not divide the ", scores.dim(0), " batch * heads rows of scores (",
           scores.describe(), "); pass the number of attention heads");
  const int64_t t = scores.dim(1);
  const int32_t* valid = nullptr;
  if (key_valid.defined()) {
    op_check::tensor(op, "key_valid", key_valid, DType::kI32, stream);
    LS_CHECK(
        key_valid.ndim() == 2 && key_valid.dim(0) == scores.dim(0) / heads && key_valid.dim(1) == t,
        op, ": key_valid is ", key_valid.describe(), "; expected [", scores.dim(0) / heads, ", ", t,
        "] (batch, keys) for scores ", scores.describe(), " and heads = ", heads,
        ", or an undefined Tensor for no padding");
    valid = key_valid.i32();
  }
  detail::check_scores(op, "probs", probs, stream);
  LS_CHECK(probs.shape() == scores.shape(), op, ": probs is ", probs.describe(),
           "; expected the shape of scores (", scores.describe(), ")");
  detail::check_same_or_disjoint(op, "probs", probs, "scores", scores);
  op_entry(&AttentionOps::attention_softmax, op, stream)(scores.f32(), valid, scores.dim(0), heads,
                                                         t, causal, scale, probs.f32(), stream);
}

// dscores = scale * probs * (dprobs - sum_j(dprobs * probs)) per row (overwrites; dscores may be
// dprobs). Masked keys have probs 0 and so get 0. causal: keys j > i of query row i get 0 without
// dprobs there being read, so dprobs may hold anything above the diagonal (causal_scores in
// ops/causal_gemm.h does not write it).
inline void attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                       const Tensor& dscores, Stream& stream, bool causal = false) {
  constexpr const char* op = "attention_softmax_backward";
  detail::check_scores(op, "probs", probs, stream);
  for (auto [name, t] : {std::pair{"dprobs", &dprobs}, {"dscores", &dscores}}) {
    op_check::tensor(op, name, *t, DType::kF32, stream);
    LS_CHECK(t->shape() == probs.shape(), op, ": ", name, " is ", t->describe(),
             "; expected the shape of probs (", probs.describe(), ")");
  }
  detail::check_same_or_disjoint(op, "dscores", dscores, "dprobs", dprobs);
  detail::check_same_or_disjoint(op, "dscores", dscores, "probs", probs);
  op_entry(&AttentionOps::attention_softmax_backward, op, stream)(
      probs.f32(), dprobs.f32(), probs.dim(0) * probs.dim(1), probs.dim(2), causal, scale,
      dscores.f32(), stream);
}

// y (+)= x relaid out: x [B, T, G, H, D] (token-major; G = 3 for a fused qkv projection, 1 for
// the attention output) -> y [G, B, H, T, D] (head-major, the operand of matmul_batched).
// dims = {B, T, G, H, D}; only the element counts of x and y are checked against dims.
inline void split_heads(const Tensor& x, const Tensor& y, const std::array<int64_t, 5>& dims,
                        bool accumulate, Stream& stream) {
  detail::check_heads_layout("split_heads", x, y, dims, stream);
  op_entry(&AttentionOps::split_heads, "split_heads", stream)(x.f32(), y.f32(), dims, accumulate,
                                                              stream);
}

// y = split_heads of x, cast to bf16 as it goes (y DType::kBF16): bit for bit
// cast(split_heads(x)) in one pass, for the bf16 operands of attention's products.
inline void split_heads_bf16(const Tensor& x, const Tensor& y, const std::array<int64_t, 5>& dims,
                             Stream& stream) {
  detail::check_heads_layout("split_heads_bf16", x, y, dims, stream, DType::kBF16);
  op_entry(&AttentionOps::split_heads_bf16, "split_heads_bf16", stream)(x.f32(), y.bf16(), dims,
                                                                        stream);
}

// x (+)= y relaid out: y [G, B, H, T, D] -> x [B, T, G, H, D], the inverse of split_heads.
inline void merge_heads(const Tensor& y, const Tensor& x, const std::array<int64_t, 5>& dims,
                        bool accumulate, Stream& stream) {
  detail::check_heads_layout("merge_heads", x, y, dims, stream);
  op_entry(&AttentionOps::merge_heads, "merge_heads", stream)(y.f32(), x.f32(), dims, accumulate,
                                                              stream);
}

}  // namespace ls
