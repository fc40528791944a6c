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
#include <lockstep/precision.h>
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

// Fused attention: a table of its own, so each backend registers it from its own file
// (ops/host/fused_attention.cpp, ops/cuda/fused_attention.cu).
struct FusedAttentionOps {
  // Over head-major q, k, v [batch_heads, t, d], each f32 or (bf16) bf16 bits:
  // out [batch_heads, t, d] = softmax(scale q k^T, masked as attention_softmax) v, the
  // probabilities never stored whole.
  void (*fused_attention)(const void* q, const void* k, const void* v, bool bf16,
                          const int32_t* key_valid, int64_t batch_heads, int64_t heads, int64_t t,
                          int64_t d, bool causal, float scale, int64_t block_rows, float* out,
                          Stream& stream) = nullptr;
  // Query rows are taken block_rows at a time (0: the kernel's choice for t).
  // Its backward from dout (the operands' type): dq, dk, dv [batch_heads, t, d] f32, overwritten.
  void (*fused_attention_backward)(const void* q, const void* k, const void* v, const void* dout,
                                   bool bf16, const int32_t* key_valid, int64_t batch_heads,
                                   int64_t heads, int64_t t, int64_t d, bool causal, float scale,
                                   int64_t block_rows, float* dq, float* dk, float* dv,
                                   Stream& stream) = nullptr;
  // Optional: whether the two kernels take head dim d with these operands (null: every d, f32
  // and bf16). CUDA takes bf16 with d = 16, 32 or 64; nn::attention runs the unfused ops else.
  bool (*supports)(int64_t d, bool bf16) = nullptr;
  // Optional, bf16 products on the head dims `supports` takes: fused attention straight from the
  // packed projections, with no head-major copies. qkv f32 [batch * t, 3 * heads * d] (each
  // token's q, k and v side by side, the heads inside each, as the qkv linear writes them),
  // rounded to bf16 as it is read (as split_heads_bf16 rounds it); out f32 [batch * t,
  // heads * d], token-major (what merge_heads would give); out16 (may be null) gets out rounded to
  // bf16 as well (f32_to_bf16's bits).
  void (*packed_attention)(const float* qkv, const int32_t* key_valid, int64_t batch,
                           int64_t heads, int64_t t, int64_t d, bool causal, float scale,
                           float* out, uint16_t* out16, Stream& stream) = nullptr;
  // Its backward from dout f32 [batch * t, heads * d]: dqkv f32 in qkv's layout, overwritten, or
  // added to when accumulate; or (dqkv null) dqkv16 in bf16, overwritten, each element the
  // f32_to_bf16 of what dqkv would hold.
  void (*packed_attention_backward)(const float* qkv, const float* dout, const int32_t* key_valid,
                                    int64_t batch, int64_t heads, int64_t t, int64_t d, bool causal,
                                    float scale, float* dqkv, uint16_t* dqkv16, bool accumulate,
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
// The operands of fused attention: q, k, v (and dout) [batch_heads, T, D], one dtype, f32 or
// bf16; key_valid as attention_softmax takes it.
inline void check_fused_operands(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor* dout, const Tensor& key_valid, int64_t heads,
                                 const Stream& stream) {
  const DType type = q.dtype();
  LS_CHECK(type == DType::kF32 || type == DType::kBF16, op, ": q is ", q.describe(),
           "; expected f32 or bf16 operands");
  for (auto [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}, {"dout", dout}}) {
    if (t == nullptr) continue;
    op_check::tensor(op, name, *t, type, stream);
    LS_CHECK(t->ndim() == 3 && t->shape() == q.shape(), op, ": ", name, " is ", t->describe(),
             "; expected [batch * heads, T, D] of the shape of q (", q.describe(), ")");
  }
  LS_CHECK(heads > 0 && q.dim(0) % heads == 0, op, ": heads = ", heads, " does not divide the ",
           q.dim(0), " batch * heads matrices of q (", q.describe(),
           "); pass the number of attention heads");
  if (key_valid.defined()) {
    op_check::tensor(op, "key_valid", key_valid, DType::kI32, stream);
    LS_CHECK(key_valid.ndim() == 2 && key_valid.dim(0) == q.dim(0) / heads &&
                 key_valid.dim(1) == q.dim(1),
             op, ": key_valid is ", key_valid.describe(), "; expected [", q.dim(0) / heads, ", ",
             q.dim(1), "] (batch, keys) for q ", q.describe(), " and heads = ", heads,
             ", or an undefined Tensor for no padding");
  }
}

// FLOPs of `products` [T, T] x D products per matrix of q [batch * heads, T, D]; causal halves.
inline double attention_flops(int64_t batch_heads, int64_t t, int64_t d, bool causal,
                              int products) {
  const double rows = static_cast<double>(t);
  return 2.0 * static_cast<double>(batch_heads) * rows * rows * static_cast<double>(d) *
         products * (causal ? 0.5 : 1.0);
}
inline double attention_flops(const Tensor& q, bool causal, int products) {
  return attention_flops(q.dim(0), q.dim(1), q.dim(2), causal, products);
}

inline void check_fused_output(const char* op, const char* name, const Tensor& out, const Tensor& q,
                               const Stream& stream) {
  op_check::tensor(op, name, out, DType::kF32, stream);
  LS_CHECK(out.shape() == q.shape(), op, ": ", name, " is ", out.describe(),
           "; expected the shape of q (", q.describe(), ")");
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
  op_entry(&AttentionOps::attention_softmax, op, stream, [&] {
    // Reads the scores it does not mask (under causal, the lower half), writes every probability.
    Launch launch = ledger::moves("attention_softmax_kernel", {&probs, &key_valid});
    launch.bytes += ledger::bytes(scores) * (causal ? 0.5 : 1.0);
    return OpLaunches{launch};
  })(scores.f32(), valid, scores.dim(0), heads, t, causal, scale, probs.f32(), stream);
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
  op_entry(&AttentionOps::attention_softmax_backward, op, stream,
           [&] {
             Launch launch = ledger::moves("attention_softmax_backward_kernel", {&dscores});
             launch.bytes += (ledger::bytes(probs) + ledger::bytes(dprobs)) * (causal ? 0.5 : 1.0);
             return OpLaunches{launch};
           })(probs.f32(), dprobs.f32(), probs.dim(0) * probs.dim(1), probs.dim(2), causal, scale,
              dscores.f32(), stream);
}

// y (+)= x relaid out: x [B, T, G, H, D] (token-major; G = 3 for a fused qkv projection, 1 for
// the attention output) -> y [G, B, H, T, D] (head-major, the operand of matmul_batched).
// dims = {B, T, G, H, D}; only the element counts of x and y are checked against dims.
inline void split_heads(const Tensor& x, const Tensor& y, const std::array<int64_t, 5>& dims,
                        bool accumulate, Stream& stream) {
  detail::check_heads_layout("split_heads", x, y, dims, stream);
  op_entry(&AttentionOps::split_heads, "split_heads", stream, [&] {
    return OpLaunches{ledger::moves("permute_heads_kernel", {&x, &y, accumulate ? &y : nullptr})};
  })(x.f32(), y.f32(), dims, accumulate, stream);
}

// y = split_heads of x, cast to bf16 as it goes (y DType::kBF16): bit for bit
// cast(split_heads(x)) in one pass, for the bf16 operands of attention's products.
inline void split_heads_bf16(const Tensor& x, const Tensor& y, const std::array<int64_t, 5>& dims,
                             Stream& stream) {
  detail::check_heads_layout("split_heads_bf16", x, y, dims, stream, DType::kBF16);
  op_entry(&AttentionOps::split_heads_bf16, "split_heads_bf16", stream, [&] {
    return OpLaunches{ledger::moves("split_heads_bf16_kernel", {&x, &y})};
  })(x.f32(), y.bf16(), dims, stream);
}

// x (+)= y relaid out: y [G, B, H, T, D] -> x [B, T, G, H, D], the inverse of split_heads.
inline void merge_heads(const Tensor& y, const Tensor& x, const std::array<int64_t, 5>& dims,
                        bool accumulate, Stream& stream) {
  detail::check_heads_layout("merge_heads", x, y, dims, stream);
  op_entry(&AttentionOps::merge_heads, "merge_heads", stream, [&] {
    return OpLaunches{ledger::moves("permute_heads_kernel", {&y, &x, accumulate ? &x : nullptr})};
  })(y.f32(), x.f32(), dims, accumulate, stream);
}

// Whether `kind` runs fused attention: it has a FusedAttentionOps table (the host; CUDA when
// built).
bool fused_attention_available(DeviceKind kind);
// Whether `kind`'s fused kernels take head dim d in `precision` (f32 or bf16 operands).
bool fused_attention_supports(DeviceKind kind, int64_t d, Precision precision);
// Whether `kind` has packed_attention (CUDA) and its kernels take head dim d in `precision`.
bool packed_attention_available(DeviceKind kind, int64_t d, Precision precision);

// When nn::attention takes the fused kernels where available (process-wide): kWhenFaster (the
// default) where fused_attention_pays, kAlways, or kNever. The environment variable
// LOCKSTEP_FUSED_ATTENTION=auto|on|off sets it at start; tests and benchmarks set it to compare.
enum class FusedAttentionUse : uint8_t { kWhenFaster, kAlways, kNever };
FusedAttentionUse fused_attention_use();
void set_fused_attention_use(FusedAttentionUse use);

// Whether the host fuses attention for T keys in `precision` by default, from lockstep-bench
// attention/layer (one layer forward and backward, two runs, AMD EPYC with AVX2,
// docs/benchmarks.md part 5): bf16 emulated in f32 from T = 256, where fused takes 0.67-0.71x of
// the unfused time (0.41-0.44x at T = 1024; the same time at 128); f32 from T = 512, where the
// two are within the machine's noise (0.91-0.93x at 512, 0.96-1.08x at 1024; 1.04-1.15x at 128)
// and fused keeps no [B*H, T, T] probabilities. bf16 on bf16 units is not measured yet and takes
// f32's rule.
bool fused_attention_pays(int64_t t, Precision precision);

// Whether nn::attention fuses on `kind` for T keys of head dim d in `precision`, by
// fused_attention_use(): never where the kernels decline d or the precision; kWhenFaster: on the
// host by fused_attention_pays, on CUDA always (its unfused path moves the [B*H, T, T] scores,
// probabilities and their gradients through memory; compiled, not measured on a GPU yet).
bool use_fused_attention(DeviceKind kind, int64_t t, int64_t d, Precision precision);

// out = softmax(scale q k^T + mask) v per matrix of [batch * heads, T, D], masked as
// attention_softmax: fused, so the [T, T] probabilities are never stored whole (ops/host/
// fused_attention.cpp). q, k, v f32 (f32 products) or all bf16 (bf16 products with f32
// accumulation; the probabilities are rounded to bf16 for their product, as the unfused path
// rounds them). out f32, separate from the operands. Query rows go block_rows at a time (0: the
// backend's choice for T; benchmarks pass others); results do not depend on it beyond the order
// of the f32 sums.
inline void fused_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& key_valid, int64_t heads, bool causal, float scale,
                            const Tensor& out, Stream& stream, int64_t block_rows = 0) {
  constexpr const char* op = "fused_attention";
  detail::check_fused_operands(op, q, k, v, nullptr, key_valid, heads, stream);
  detail::check_fused_output(op, "out", out, q, stream);
  LS_CHECK(block_rows >= 0, op, ": block_rows = ", block_rows, "; expected 0 (automatic) or more");
  for (const Tensor* in : {&q, &k, &v}) {
    LS_CHECK(!op_check::overlaps(out, *in), op, ": out (", out.describe(),
             ") overlaps an operand (", in->describe(), "); pass a separate tensor");
  }
  op_entry(&FusedAttentionOps::fused_attention, op, stream,
           [&] {
             // ops/cuda/fused_attention.cu: S = Q K^T and O = P V in one kernel.
             Launch launch =
                 ledger::moves("fused_attention_forward_kernel", {&q, &k, &v, &out, &key_valid});
             launch.rate = LaunchRate::kFusedAttention;
             launch.flops = detail::attention_flops(q, causal, 2);
             return OpLaunches{launch};
           })(q.data(), k.data(), v.data(), q.dtype() == DType::kBF16,
              key_valid.defined() ? key_valid.i32() : nullptr, q.dim(0), heads, q.dim(1), q.dim(2),
              causal, scale, block_rows, out.f32(), stream);
}

// The backward of fused_attention: dq, dk, dv (f32, the shape of q, overwritten, separate from
// each other and the inputs) from dout (the operands' dtype). It recomputes each block's
// probabilities from q and k, bit for bit those of the forward.
inline void fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& dout, const Tensor& key_valid, int64_t heads,
                                     bool causal, float scale, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv, Stream& stream, int64_t block_rows = 0) {
  constexpr const char* op = "fused_attention_backward";
  detail::check_fused_operands(op, q, k, v, &dout, key_valid, heads, stream);
  LS_CHECK(block_rows >= 0, op, ": block_rows = ", block_rows, "; expected 0 (automatic) or more");
  // Each gradient against every input and the gradients after it.
  const std::array<std::pair<const char*, const Tensor*>, 7> all{
      {{"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}}};
  for (size_t i = 0; i < 3; ++i) {
    const auto [name, out] = all[i];
    detail::check_fused_output(op, name, *out, q, stream);
    for (size_t j = i + 1; j < all.size(); ++j) {
      LS_CHECK(!op_check::overlaps(*out, *all[j].second), op, ": ", name, " (", out->describe(),
               ") overlaps ", all[j].first, " (", all[j].second->describe(),
               "); each gradient needs a tensor of its own");
    }
  }
  op_entry(&FusedAttentionOps::fused_attention_backward, op, stream,
           [&] {
             // ops/cuda/fused_attention.cu: dQ (S and dP twice, dS K) then dK and dV (S, dP, P^T
             // dO, dS^T Q); see Note [Fused attention on CUDA].
             Launch for_dq =
                 ledger::moves("fused_attention_dq_kernel", {&q, &k, &v, &dout, &dq, &key_valid});
             for_dq.rate = LaunchRate::kFusedAttention;
             for_dq.flops = detail::attention_flops(q, causal, 5);
             Launch for_dkdv = ledger::moves("fused_attention_dkdv_kernel",
                                             {&q, &k, &v, &dout, &dk, &dv, &key_valid});
             for_dkdv.rate = LaunchRate::kFusedAttention;
             for_dkdv.flops = detail::attention_flops(q, causal, 4);
             return OpLaunches{for_dq, for_dkdv};
           })(q.data(), k.data(), v.data(), dout.data(), q.dtype() == DType::kBF16,
              key_valid.defined() ? key_valid.i32() : nullptr, q.dim(0), heads, q.dim(1), q.dim(2),
              causal, scale, block_rows, dq.f32(), dk.f32(), dv.f32(), stream);
}

namespace detail {
// qkv [batch * t, 3 * heads * d] (or [B, T, 3C]) and a context-shaped tensor [batch * t, heads * d].
inline int64_t check_packed(const char* op, const Tensor& qkv, const Tensor& context,
                            const char* context_name, const Tensor& key_valid, int64_t batch,
                            int64_t heads, const Stream& stream) {
  op_check::tensor(op, "qkv", qkv, DType::kF32, stream);
  op_check::tensor(op, context_name, context, DType::kF32, stream);
  LS_CHECK(batch > 0 && heads > 0 && qkv.ndim() == 2 && qkv.dim(0) % batch == 0 &&
               qkv.dim(1) % (3 * heads) == 0,
           op, ": qkv is ", qkv.describe(), "; expected [batch * seq, 3 * heads * head_dim] with ",
           "batch = ", batch, " and heads = ", heads);
  const int64_t t = qkv.dim(0) / batch, c = qkv.dim(1) / 3;
  LS_CHECK(context.ndim() == 2 && context.dim(0) == qkv.dim(0) && context.dim(1) == c, op, ": ",
           context_name, " is ", context.describe(), "; expected [", qkv.dim(0), ", ", c,
           "] for qkv ", qkv.describe());
  LS_CHECK(!op_check::overlaps(context, qkv), op, ": ", context_name, " overlaps qkv; pass a "
           "separate tensor");
  if (key_valid.defined()) {
    op_check::tensor(op, "key_valid", key_valid, DType::kI32, stream);
    LS_CHECK(key_valid.ndim() == 2 && key_valid.dim(0) == batch && key_valid.dim(1) == t, op,
             ": key_valid is ", key_valid.describe(), "; expected [", batch, ", ", t,
             "] (batch, keys), or an undefined Tensor for no padding");
  }
  return t;
}
}  // namespace detail

// out [batch * t, heads * d] = softmax(scale q k^T, masked as attention_softmax) v per head, from
// the packed projections qkv [batch * t, 3 * heads * d] as they are: no head-major copies (CUDA,
// bf16 products; see FusedAttentionOps::packed_attention). out is overwritten; out16 (bf16, out's
// shape, or undefined) gets it rounded to bf16 too, bit for bit cast(out).
inline void packed_attention(const Tensor& qkv, const Tensor& key_valid, int64_t batch,
                             int64_t heads, bool causal, float scale, const Tensor& out,
                             Stream& stream, const Tensor& out16 = Tensor()) {
  constexpr const char* op = "packed_attention";
  const int64_t t = detail::check_packed(op, qkv, out, "out", key_valid, batch, heads, stream);
  const int64_t d = qkv.dim(1) / (3 * heads);
  if (out16.defined()) {
    op_check::tensor(op, "out16", out16, DType::kBF16, stream);
    LS_CHECK(out16.shape() == out.shape(), op, ": out16 is ", out16.describe(),
             "; expected the shape of out (", out.describe(), ")");
  }
  op_entry(&FusedAttentionOps::packed_attention, op, stream, [&] {
    // ops/cuda/fused_attention.cu: the forward kernel, reading q, k, v where they are.
    Launch launch =
        ledger::moves("fused_attention_forward_kernel", {&qkv, &out, &out16, &key_valid});
    launch.rate = LaunchRate::kFusedAttention;
    launch.flops = detail::attention_flops(batch * heads, t, d, causal, 2);
    return OpLaunches{launch};
  })(qkv.f32(), key_valid.defined() ? key_valid.i32() : nullptr, batch, heads, t, d, causal, scale,
     out.f32(), out16.defined() ? out16.bf16() : nullptr, stream);
}

// The backward of packed_attention: dqkv (qkv's shape) = or += (accumulate) the gradient from
// dout (out's shape), recomputing the probabilities from qkv. A bf16 dqkv (not accumulated) gets
// the gradient rounded as it is written: what a bf16 step's qkv linear multiplies.
inline void packed_attention_backward(const Tensor& qkv, const Tensor& dout,
                                      const Tensor& key_valid, int64_t batch, int64_t heads,
                                      bool causal, float scale, const Tensor& dqkv,
                                      bool accumulate, Stream& stream) {
  constexpr const char* op = "packed_attention_backward";
  const int64_t t = detail::check_packed(op, qkv, dout, "dout", key_valid, batch, heads, stream);
  const int64_t d = qkv.dim(1) / (3 * heads);
  const bool bf16_grad = dqkv.defined() && dqkv.dtype() == DType::kBF16;
  op_check::tensor(op, "dqkv", dqkv, bf16_grad ? DType::kBF16 : DType::kF32, stream);
  LS_CHECK(!(bf16_grad && accumulate), op,
           ": a bf16 dqkv is written, not added to; pass an f32 "
           "dqkv to accumulate");
  LS_CHECK(dqkv.shape() == qkv.shape(), op, ": dqkv is ", dqkv.describe(),
           "; expected the shape of qkv (", qkv.describe(), ")");
  LS_CHECK(!op_check::overlaps(dqkv, qkv) && !op_check::overlaps(dqkv, dout), op,
           ": dqkv overlaps qkv or dout; give it its own tensor");
  op_entry(&FusedAttentionOps::packed_attention_backward, op, stream,
           [&] {
             Launch for_dq =
                 ledger::moves("fused_attention_dq_kernel", {&qkv, &dout, &dqkv, &key_valid});
             for_dq.rate = LaunchRate::kFusedAttention;
             for_dq.flops = detail::attention_flops(batch * heads, t, d, causal, 5);
             Launch for_dkdv =
                 ledger::moves("fused_attention_dkdv_kernel", {&qkv, &dout, &dqkv, &key_valid});
             for_dkdv.rate = LaunchRate::kFusedAttention;
             for_dkdv.flops = detail::attention_flops(batch * heads, t, d, causal, 4);
             return OpLaunches{for_dq, for_dkdv};
           })(qkv.f32(), dout.f32(), key_valid.defined() ? key_valid.i32() : nullptr, batch, heads,
              t, d, causal, scale, bf16_grad ? nullptr : dqkv.f32(),
              bf16_grad ? dqkv.bf16() : nullptr, accumulate, stream);
}

}  // namespace ls
