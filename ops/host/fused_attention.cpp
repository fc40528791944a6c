// Host kernels of fused attention (ops/attention.h, fused_attention and its backward).
//
// The unfused path writes each layer's [B*H, T, T] scores, normalises them in place, rounds a bf16
// copy, and keeps the probabilities for backward, which writes dP and dS of the same size: at
// GPT-2's T = 1024, 12 heads, 48 MB per pass and 72 MB kept per layer. Here one head's query rows
// go a block at a time, and a block's scores [rows, keys] stay in cache from its product to its
// use:
//   forward, per block i:   S = Q_i K^T over the keys it sees (causal: keys < the block's end),
//                           P = softmax rows of S (in place), O_i = P V
//   backward, per block i:  S and P again (the same products and rows, so bit for bit the
//                           forward's P), dP = dO_i V^T, dS = softmax backward rows (in place),
//                           dV += P^T dO_i, dQ_i = dS K, dK += dS^T Q_i
// Each block's softmax is exact over its whole row of keys (no running maximum to rescale): a
// block of `rows` x T scores is rows * T * 4 bytes, and block_rows() keeps it within L2 up to long
// sequences. Causal blocks skip the keys after their last row, as ops/causal_gemm.h does.
//
// bf16 operands multiply as bf16 with f32 accumulation, and P and dS are rounded to bf16 for their
// products (the unfused path rounds them the same way): on the bf16 units (oneDNN) where the CPU
// has them, else widened to f32 once per head and multiplied in f32, rounded values kept in f32.
//
// Work splits over heads (host_parallel_for); a head runs its blocks in order on one thread, so dK
// and dV sum the blocks in a fixed order: results do not depend on the number of threads.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "engine/core/host/host_device.h"
#include "ops/attention.h"
#include "ops/host/bf16_convert.h"
#include "ops/host/fused_attention.h"
#include "ops/host/host_gemm.h"
#include "ops/host/host_ops.h"
#include "ops/host/onednn_matmul.h"
#include "ops/host/softmax_rows.h"

namespace ls {
namespace {

// Query rows per block for T keys: T / 4 within [32, 64], measured best on an AMD EPYC (AVX2) at
// T = 128 to 1024 (lockstep-bench attention/layer, docs/benchmarks.md), and fewer where a block's
// f32 scores would pass 256 KiB (two such buffers, S and dP, live in backward), at least 16 rows.
int64_t block_rows(int64_t t, int64_t requested) {
  if (requested > 0) return std::min(requested, t);
  constexpr int64_t kBlockFloats = 64 * 1024;
  int64_t rows = std::clamp<int64_t>(t / 4, 32, 64);
  while (rows > 16 && rows * t > kBlockFloats) rows /= 2;
  return std::min(rows, t);
}

// How the products of one call multiply.
enum class Products {
  kF32,           // f32 operands, f32 products
  kBf16Units,     // bf16 operands on the CPU's bf16 units
  kBf16Emulated,  // bf16 operands widened to f32 (exact), rounded values multiplied in f32
};

Products products_for(bool bf16) {
  if (!bf16) return Products::kF32;
  return onednn::native_bf16_enabled() ? Products::kBf16Units : Products::kBf16Emulated;
}

// Per-thread buffers, reused across calls so a step allocates nothing once warm.
struct BlockScratch {
  std::vector<float> s, dp;          // [rows, T]: S then P; dP then dS
  std::vector<uint16_t> p16, ds16;   // bf16 copies of P and dS for the units
  std::vector<float> q, k, v, dout;  // one head's operands widened (emulated bf16)
};
BlockScratch& block_scratch() {
  thread_local BlockScratch scratch;
  return scratch;
}

// The buffer's storage, grown to n elements if it is smaller.
template <typename T>
T* sized(std::vector<T>& buffer, int64_t n) {
  if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
  return buffer.data();
}

// One matrix operand of a product: f32 values, or bf16 bits for the units.
struct Operand {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

// C = op(A) op(B) + beta C on the calling thread, in the call's products.
void product(Products products, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
             Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (products == Products::kBf16Units) {
    host_gemm_bf16(trans_a, trans_b, m, n, k, 1.0f, a.bf16, lda, b.bf16, ldb, beta, c, ldc);
  } else {
    host_gemm_f32(trans_a, trans_b, m, n, k, 1.0f, a.f32, lda, b.f32, ldb, beta, c, ldc);
  }
}

// One head's [T, D] operand as the products take it: itself (f32, or bf16 bits for the units), or
// widened into `scratch` (emulated bf16).
Operand head_operand(const void* x, int64_t head, int64_t t, int64_t d, Products products,
                     std::vector<float>& scratch) {
  const int64_t offset = head * t * d;
  switch (products) {
    case Products::kF32:
      return {.f32 = static_cast<const float*>(x) + offset};
    case Products::kBf16Units:
      return {.bf16 = static_cast<const uint16_t*>(x) + offset};
    case Products::kBf16Emulated: {
      float* wide = sized(scratch, t * d);
      widen_bf16(static_cast<const uint16_t*>(x) + offset, t * d, wide);
      return {.f32 = wide};
    }
  }
  return {};
}

// The [rows, cols] f32 block x as the operand of a product: itself in f32, rounded to bf16 into
// `bits` for the units, or rounded in place (its values kept in f32) when bf16 is emulated.
Operand block_operand(float* x, int64_t n, Products products, std::vector<uint16_t>& bits) {
  switch (products) {
    case Products::kF32:
      return {.f32 = x};
    case Products::kBf16Units: {
      uint16_t* out = sized(bits, n);
      round_to_bf16(x, n, out);
      return {.bf16 = out};
    }
    case Products::kBf16Emulated:
      round_to_bf16_values(x, n, x);
      return {.f32 = x};
  }
  return {};
}

// The shape every kernel below shares.
struct Geometry {
  int64_t heads_per_batch, t, d;
  bool causal;
  float scale;
  int64_t rows;  // query rows per block
  const int32_t* key_valid;

  // The keys query block [r0, r1) sees: all T, or (causal) those before its end.
  int64_t keys(int64_t r1) const { return causal ? r1 : t; }
  // Keys of this head's batch, or null.
  const int32_t* valid(int64_t head) const {
    return key_valid == nullptr ? nullptr : key_valid + (head / heads_per_batch) * t;
  }
};

// The operand of the rows from r0 of a [T, D] head operand.
Operand rows_of(Operand x, int64_t r0, int64_t d) {
  return x.bf16 != nullptr ? Operand{.bf16 = x.bf16 + r0 * d} : Operand{.f32 = x.f32 + r0 * d};
}

// S = Q_i K^T for query rows [r0, r1), then P = softmax of each row in place ([r1 - r0, e]).
void block_probabilities(const Geometry& g, int64_t head, int64_t r0, int64_t r1, Operand q,
                         Operand k, Products products, float* s) {
  const int64_t m = r1 - r0, e = g.keys(r1), d = g.d;
  product(products, false, true, m, e, d, rows_of(q, r0, d), d, k, d, 0.0f, s, e);
  const int32_t* valid = g.valid(head);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t limit = g.causal ? r0 + i + 1 : e;
    softmax_row(s + i * e, valid, e, limit, g.scale, s + i * e);
  }
}

void forward_head(const Geometry& g, int64_t head, const void* q_in, const void* k_in,
                  const void* v_in, Products products, float* out) {
  BlockScratch& scratch = block_scratch();
  const int64_t t = g.t, d = g.d;
  const Operand q = head_operand(q_in, head, t, d, products, scratch.q);
  const Operand k = head_operand(k_in, head, t, d, products, scratch.k);
  const Operand v = head_operand(v_in, head, t, d, products, scratch.v);
  float* o = out + head * t * d;
  float* s = sized(scratch.s, g.rows * t);
  for (int64_t r0 = 0; r0 < t; r0 += g.rows) {
    const int64_t r1 = std::min(t, r0 + g.rows), m = r1 - r0, e = g.keys(r1);
    block_probabilities(g, head, r0, r1, q, k, products, s);
    const Operand p = block_operand(s, m * e, products, scratch.p16);
    product(products, false, false, m, d, e, p, e, v, d, 0.0f, o + r0 * d, d);
  }
}

void backward_head(const Geometry& g, int64_t head, const void* q_in, const void* k_in,
                   const void* v_in, const void* dout_in, Products products, float* dq_out,
                   float* dk_out, float* dv_out) {
  BlockScratch& scratch = block_scratch();
  const int64_t t = g.t, d = g.d;
  const Operand q = head_operand(q_in, head, t, d, products, scratch.q);
  const Operand k = head_operand(k_in, head, t, d, products, scratch.k);
  const Operand v = head_operand(v_in, head, t, d, products, scratch.v);
  const Operand dout = head_operand(dout_in, head, t, d, products, scratch.dout);
  float* dq = dq_out + head * t * d;
  float* dk = dk_out + head * t * d;
  float* dv = dv_out + head * t * d;
  // dK and dV sum over the query blocks in order; causal blocks reach only the keys before their
  // end, so the rows after it start from zero.
  std::fill(dk, dk + t * d, 0.0f);
  std::fill(dv, dv + t * d, 0.0f);
  float* s = sized(scratch.s, g.rows * t);
  float* dp = sized(scratch.dp, g.rows * t);
  for (int64_t r0 = 0; r0 < t; r0 += g.rows) {
    const int64_t r1 = std::min(t, r0 + g.rows), m = r1 - r0, e = g.keys(r1);
    block_probabilities(g, head, r0, r1, q, k, products, s);
    const Operand dout_rows = rows_of(dout, r0, d);
    product(products, false, true, m, e, d, dout_rows, d, v, d, 0.0f, dp, e);  // dP = dO_i V^T
    for (int64_t i = 0; i < m; ++i) {
      const int64_t limit = g.causal ? r0 + i + 1 : e;
      softmax_backward_row(s + i * e, dp + i * e, e, limit, g.scale, dp + i * e);  // dS
    }
    const Operand p = block_operand(s, m * e, products, scratch.p16);
    const Operand ds = block_operand(dp, m * e, products, scratch.ds16);
    product(products, true, false, e, d, m, p, e, dout_rows, d, 1.0f, dv, d);     // dV += P^T dO_i
    product(products, false, false, m, d, e, ds, e, k, d, 0.0f, dq + r0 * d, d);  // dQ_i = dS K
    // dK += dS^T Q_i
    product(products, true, false, e, d, m, ds, e, rows_of(q, r0, d), d, 1.0f, dk, d);
  }
}

Geometry geometry(const int32_t* key_valid, int64_t heads, int64_t t, int64_t d, bool causal,
                  float scale, int64_t requested_rows) {
  return {.heads_per_batch = heads,
          .t = t,
          .d = d,
          .causal = causal,
          .scale = scale,
          .rows = block_rows(t, requested_rows),
          .key_valid = key_valid};
}

}  // namespace

void host_fused_attention(const void* q, const void* k, const void* v, bool bf16,
                          const int32_t* key_valid, int64_t batch_heads, int64_t heads, int64_t t,
                          int64_t d, bool causal, float scale, int64_t block_rows_requested,
                          float* out, Stream& stream) {
  LS_ASSERT(batch_heads >= 0 && heads > 0 && t >= 0 && d >= 0,
            "fused_attention sizes bh=", batch_heads, " heads=", heads, " t=", t, " d=", d);
  if (batch_heads == 0 || t == 0 || d == 0) return;
  const Geometry g = geometry(key_valid, heads, t, d, causal, scale, block_rows_requested);
  const Products products = products_for(bf16);
  host_enqueue(stream, [=] {
    host_parallel_for(0, batch_heads, 1, [=](int64_t h0, int64_t h1) {
      for (int64_t head = h0; head < h1; ++head) forward_head(g, head, q, k, v, products, out);
    });
  });
}

void host_fused_attention_backward(const void* q, const void* k, const void* v, const void* dout,
                                   bool bf16, const int32_t* key_valid, int64_t batch_heads,
                                   int64_t heads, int64_t t, int64_t d, bool causal, float scale,
                                   int64_t block_rows_requested, float* dq, float* dk, float* dv,
                                   Stream& stream) {
  LS_ASSERT(batch_heads >= 0 && heads > 0 && t >= 0 && d >= 0,
            "fused_attention_backward sizes bh=", batch_heads, " heads=", heads, " t=", t,
            " d=", d);
  if (batch_heads == 0 || t == 0 || d == 0) return;
  const Geometry g = geometry(key_valid, heads, t, d, causal, scale, block_rows_requested);
  const Products products = products_for(bf16);
  host_enqueue(stream, [=] {
    host_parallel_for(0, batch_heads, 1, [=](int64_t h0, int64_t h1) {
      for (int64_t head = h0; head < h1; ++head) {
        backward_head(g, head, q, k, v, dout, products, dq, dk, dv);
      }
    });
  });
}

namespace {
FusedAttentionUse use_from_environment() {
  const char* env = std::getenv("LOCKSTEP_FUSED_ATTENTION");
  if (env == nullptr) return FusedAttentionUse::kWhenFaster;
  const std::string_view value(env);
  if (value == "on") return FusedAttentionUse::kAlways;
  if (value == "off") return FusedAttentionUse::kNever;
  LS_CHECK(value == "auto" || value.empty(), "LOCKSTEP_FUSED_ATTENTION=", value,
           " is not one of auto, on, off; unset it or pick one");
  return FusedAttentionUse::kWhenFaster;
}

std::atomic<FusedAttentionUse>& use_setting() {
  static std::atomic<FusedAttentionUse> use{use_from_environment()};
  return use;
}
}  // namespace

const FusedAttentionOps kHostFusedAttention{
    .fused_attention = host_fused_attention,
    .fused_attention_backward = host_fused_attention_backward,
};
LS_REGISTER_OP_TABLE(FusedAttentionOps, DeviceKind::kHost, kHostFusedAttention);

bool fused_attention_available(DeviceKind kind) {
  const FusedAttentionOps* table = find_op_table<FusedAttentionOps>(kind);
  return table != nullptr && table->fused_attention != nullptr &&
         table->fused_attention_backward != nullptr;
}

bool fused_attention_supports(DeviceKind kind, int64_t d, Precision precision) {
  if (!fused_attention_available(kind) || precision == Precision::kF16) return false;
  const FusedAttentionOps* table = find_op_table<FusedAttentionOps>(kind);
  return table->supports == nullptr || table->supports(d, precision == Precision::kBF16);
}

FusedAttentionUse fused_attention_use() { return use_setting().load(std::memory_order_relaxed); }
void set_fused_attention_use(FusedAttentionUse use) {
  use_setting().store(use, std::memory_order_relaxed);
}

bool fused_attention_pays(int64_t t, Precision precision) {
  return t >= (precision == Precision::kBF16 && !onednn::native_bf16_enabled() ? 256 : 512);
}

bool packed_attention_available(DeviceKind kind, int64_t d, Precision precision) {
  const FusedAttentionOps* table = find_op_table<FusedAttentionOps>(kind);
  return precision == Precision::kBF16 && fused_attention_supports(kind, d, precision) &&
         table->packed_attention != nullptr && table->packed_attention_backward != nullptr;
}

bool use_fused_attention(DeviceKind kind, int64_t t, int64_t d, Precision precision) {
  if (!fused_attention_supports(kind, d, precision)) return false;
  switch (fused_attention_use()) {
    case FusedAttentionUse::kAlways:
      return true;
    case FusedAttentionUse::kNever:
      return false;
    case FusedAttentionUse::kWhenFaster:
      return kind == DeviceKind::kCuda || fused_attention_pays(t, precision);
  }
  return false;
}

}  // namespace ls
