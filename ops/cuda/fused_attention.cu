// CUDA kernels of fused attention (ops/attention.h, fused_attention and its backward): flash-style
// kernels on tensor cores (nvcuda::wmma: 16 x 16 x 16 bf16 tiles, f32 accumulation) that never
// store the [T, T] scores. bf16 operands, head dims 16, 32 and 64; anything else is declined
// (fused_attention_supports) and nn::attention runs the unfused ops.
//
// Note [Fused attention on CUDA]
// forward, a block per (batch-head, 64 query rows), 4 warps of 16 rows, keys 32 at a time:
//   S = Q K^T (wmma), then each row's running maximum m and sum l (online softmax: a lane pair a
//   row), P = exp(S - m) rounded to bf16, O = O * exp(m_old - m) + P V (wmma, O in shared
//   memory); at the end out = O / l. Causal blocks stop at their last row's key.
// backward, two kernels, no atomics (every sum has one owner and a fixed order):
//   dq:   the forward's blocks again, two passes over the keys: the first finds m, l and
//         delta = sum_j P dP (= rowsum(dO * O)) from S and dP = dO V^T; the second forms
//         dS = P (dP - delta) scale, rounds it to bf16 and adds dS K into dQ. It writes each
//         row's logsumexp and delta for the second kernel.
//   dk/dv: a block per (batch-head, 64 keys), queries 16 at a time: S^T and dP^T again, P and dS
//         from the saved row statistics, dV += P^T dO and dK += dS^T Q.
// That is 9 products of [T, T] x D in backward against FlashAttention-2's 5 (whose dQ sums over
// key blocks with float atomics); a fixed-order sum costs the recomputation.
// __launch_bounds__(128, 1): with no occupancy target, ptxas capped the dq kernel at 64 registers
// and spilled at head dim 16. wmma loads and stores want 256-bit aligned tile pointers and leading dimensions of 16 bytes: the
// shared tiles are alignas(32), every tile offset is a multiple of 16 rows or 16 columns, and the
// leading dimensions are D, 32 or 16 elements.
// P and dS are rounded to bf16 for their products, as the unfused path rounds them. Runs repeat
// bitwise; they differ from the host's fused kernels in the order of f32 sums (online softmax).
// Compiled, not run on a GPU yet; the CPU emulator runs them (its <mma.h>) in CI.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>

#include "ops/attention.h"
#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/cuda_launch.h"

namespace ls::cuda_ops {
namespace {

namespace wmma = nvcuda::wmma;
using Bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kWarps = 4;
constexpr int kBlockThreads = 32 * kWarps;
constexpr int kRowTile = 16 * kWarps;  // query rows a block (forward, dq); keys a block (dk/dv)
constexpr int kKeyStep = 32;           // keys a step (forward, dq)
constexpr int kQueryStep = 16;         // queries a step (dk/dv)
constexpr unsigned kFullWarp = 0xffffffffu;

struct AttentionShape {
  int64_t t;
  int64_t heads;
  bool causal;
  float scale;
  const int32_t* key_valid;  // [batch, t] or null
};

// Whether query i of batch-head bh sees key j.
__device__ inline bool key_visible(const AttentionShape& s, int64_t bh, int64_t i, int64_t j) {
  if (i >= s.t || j >= s.t || (s.causal && j > i)) return false;
  return s.key_valid == nullptr || s.key_valid[(bh / s.heads) * s.t + j] != 0;
}

// The [t, D] matrix of batch-head bh inside an operand of either layout: head-major
// [B*H, T, D] (row stride D, head stride T*D) or packed [B*T, G*H*D] as the qkv projection writes
// it (row stride G*H*D, head stride D: the head's D columns side by side in each token's row).
// Elements f32 (rounded to bf16 as they are read, as split_heads_bf16 rounds them) or bf16.
struct InMatrix {
  const void* base;
  int64_t row_stride, batch_stride, head_stride;
  bool f32;
  __device__ int64_t offset(int64_t bh, int64_t heads, int64_t row) const {
    return (bh / heads) * batch_stride + (bh % heads) * head_stride + row * row_stride;
  }
};
// An f32 result in the same layouts; accumulate adds to what is there. base16 (may be null): the
// result rounded to bf16 too, at the same offsets; with base null, the result in bf16 only (the
// packed backward's bf16 dqkv; never accumulated).
struct OutMatrix {
  float* base;
  int64_t row_stride, batch_stride, head_stride;
  bool accumulate;
  uint16_t* base16 = nullptr;
  __device__ int64_t offset(int64_t bh, int64_t heads, int64_t row, int64_t col) const {
    return (bh / heads) * batch_stride + (bh % heads) * head_stride + row * row_stride + col;
  }
  // Writes (adds) one element to the f32 result and its bf16 rounding, as each is asked for.
  __device__ void store(int64_t at, float value) const {
    if (base != nullptr) {
      value = accumulate ? base[at] + value : value;
      base[at] = value;
    }
    if (base16 != nullptr) base16[at] = f32_to_bf16_bits(value);
  }
};

// dst[rows][D] = rows [first, first + rows) of batch-head bh's matrix of src, zeros past t.
template <int D>
__device__ __forceinline__ void load_rows(const InMatrix& src, int64_t bh, int64_t heads, int64_t t,
                          int64_t first, int rows, Bf16* dst) {
  for (int e = static_cast<int>(threadIdx.x); e < rows * D; e += kBlockThreads) {
    const int64_t row = first + e / D;
    if (row >= t) {
      dst[e] = __float2bfloat16(0.0f);
      continue;
    }
    const int64_t at = src.offset(bh, heads, row) + e % D;
    dst[e] = src.f32
                 ? __ushort_as_bfloat16(f32_to_bf16_bits(static_cast<const float*>(src.base)[at]))
                 : static_cast<const Bf16*>(src.base)[at];
  }
}

// out[16 x 16] (ld ldo) = a[16 x D] (ld D) times b^T, b [16 x D] (ld D): the scores of 16 rows
// against 16 keys.
template <int D>
__device__ __forceinline__ void product_abt(const Bf16* a, const Bf16* b, float* out, int ldo) {
  FragAcc c;
  wmma::fill_fragment(c, 0.0f);
  for (int d0 = 0; d0 < D; d0 += 16) {
    FragA fa;
    FragBCol fb;
    wmma::load_matrix_sync(fa, a + d0, D);
    wmma::load_matrix_sync(fb, b + d0, D);
    wmma::mma_sync(c, fa, fb, c);
  }
  wmma::store_matrix_sync(out, c, ldo, wmma::mem_row_major);
}

// acc[n] += a[16 x K] (ld lda) times b [K x D] (ld D), for the D / 16 column tiles n.
template <int D, int K>
__device__ __forceinline__ void accumulate_ab(FragAcc (&acc)[D / 16], const Bf16* a, int lda, const Bf16* b) {
  LS_UNROLL
  for (int n = 0; n < D / 16; ++n) {
    LS_UNROLL
    for (int k0 = 0; k0 < K; k0 += 16) {
      FragA fa;
      FragBRow fb;
      wmma::load_matrix_sync(fa, a + k0, lda);
      wmma::load_matrix_sync(fb, b + k0 * D + 16 * n, D);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes (or adds) the warp's 16 x D accumulators to rows [first, first + 16) of batch-head bh's
// matrix of out (rows past t skipped), through the warp's 256 floats of staging.
template <int D>
__device__ __forceinline__ void write_rows(const FragAcc (&acc)[D / 16], float* staging, const OutMatrix& out,
                           int64_t bh, int64_t heads, int64_t t, int64_t first) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  LS_UNROLL
  for (int n = 0; n < D / 16; ++n) {
    wmma::store_matrix_sync(staging, acc[n], 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int64_t row = first + e / 16;
      if (row >= t) continue;
      out.store(out.offset(bh, heads, row, 16 * n + e % 16), staging[e]);
    }
    __syncwarp();
  }
}

// The keys a block of query rows [first, first + kRowTile) looks at: all, or under a causal mask
// those up to its last row.
__device__ __forceinline__ int64_t key_end_of(const AttentionShape& s, int64_t first) {
  return s.causal && first + kRowTile < s.t ? first + kRowTile : s.t;
}

// One step of a row's online softmax, for the lane pair that owns the row: this lane's 16 scores
// of it (s_row) scaled, or -inf where the key is not seen, in place; returns the maximum over
// both lanes' 32.
__device__ __forceinline__ float scale_mask_and_max(float* s_row, const AttentionShape& s,
                                                    int64_t bh, int64_t query,
                                                    int64_t first_key) {
  float step_max = -INFINITY;
  for (int c = 0; c < 16; ++c) {
    const float x = key_visible(s, bh, query, first_key + c) ? s_row[c] * s.scale : -INFINITY;
    s_row[c] = x;
    step_max = fmaxf(step_max, x);
  }
  return fmaxf(step_max, __shfl_xor_sync(kFullWarp, step_max, 1));
}

// See Note [Fused attention on CUDA]: forward.
template <int D>
__global__ void __launch_bounds__(kBlockThreads, 1)
    fused_attention_forward_kernel(InMatrix q, InMatrix k, InMatrix v, AttentionShape s,
                                   OutMatrix out) {
  alignas(32) __shared__ Bf16 q_tile[kRowTile * D];
  alignas(32) __shared__ Bf16 k_tile[kKeyStep * D];
  alignas(32) __shared__ Bf16 v_tile[kKeyStep * D];
  alignas(32) __shared__ float scores[kRowTile * kKeyStep];
  alignas(32) __shared__ Bf16 probs[kRowTile * kKeyStep];
  alignas(32) __shared__ float o_tile[kRowTile * D];
  const int64_t bh = blockIdx.y, first = static_cast<int64_t>(blockIdx.x) * kRowTile;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // Lanes 2r and 2r + 1 own row r of the warp's 16: its statistics and half its keys or columns.
  const int row = 16 * warp + lane / 2, half = lane % 2;
  const int64_t query = first + row;
  load_rows<D>(q, bh, s.heads, s.t, first, kRowTile, q_tile);
  for (int e = static_cast<int>(threadIdx.x); e < kRowTile * D; e += kBlockThreads) o_tile[e] = 0;
  float m = -INFINITY, l = 0.0f;
  const int64_t key_end = key_end_of(s, first);
  for (int64_t k0 = 0; k0 < key_end; k0 += kKeyStep) {
    __syncthreads();  // every warp is done with the last step's tiles
    load_rows<D>(k, bh, s.heads, s.t, k0, kKeyStep, k_tile);
    load_rows<D>(v, bh, s.heads, s.t, k0, kKeyStep, v_tile);
    __syncthreads();
    for (int n = 0; n < kKeyStep; n += 16) {
      product_abt<D>(q_tile + 16 * warp * D, k_tile + n * D, scores + 16 * warp * kKeyStep + n,
                     kKeyStep);
    }
    __syncwarp();
    float* s_row = scores + row * kKeyStep + 16 * half;
    const float m_new = fmaxf(m, scale_mask_and_max(s_row, s, bh, query, k0 + 16 * half));
    // Nothing seen yet (m_new = -inf): no rescale; else exp(-inf) = 0 drops the empty past.
    const float alpha = m_new == -INFINITY ? 1.0f : __expf(m - m_new);
    float sum = 0.0f;
    Bf16* p_row = probs + row * kKeyStep + 16 * half;
    for (int c = 0; c < 16; ++c) {
      const float p = s_row[c] == -INFINITY ? 0.0f : __expf(s_row[c] - m_new);
      p_row[c] = __float2bfloat16(p);
      sum += p;
    }
    sum += __shfl_xor_sync(kFullWarp, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    float* o_row = o_tile + row * D + (D / 2) * half;
    for (int c = 0; c < D / 2; ++c) o_row[c] *= alpha;
    __syncwarp();
    for (int n = 0; n < D; n += 16) {  // O += P V, in place
      FragAcc o;
      wmma::load_matrix_sync(o, o_tile + 16 * warp * D + n, D, wmma::mem_row_major);
      for (int k1 = 0; k1 < kKeyStep; k1 += 16) {
        FragA fp;
        FragBRow fv;
        wmma::load_matrix_sync(fp, probs + 16 * warp * kKeyStep + k1, kKeyStep);
        wmma::load_matrix_sync(fv, v_tile + k1 * D + n, D);
        wmma::mma_sync(o, fp, fv, o);
      }
      wmma::store_matrix_sync(o_tile + 16 * warp * D + n, o, D, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (query < s.t) {  // a row that sees no key (l = 0) is all 0
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float* o_row = o_tile + row * D + (D / 2) * half;
    for (int c = 0; c < D / 2; ++c) {
      out.store(out.offset(bh, s.heads, query, (D / 2) * half + c), o_row[c] * inv);
    }
  }
}

// The dq kernel's step over keys [k0, k0 + kKeyStep): the K and V tiles loaded (block-wide), then
// the warp's S = Q K^T and dP = dO V^T rows.
template <int D>
__device__ __forceinline__ void dq_step_products(const InMatrix& k, const InMatrix& v, const AttentionShape& s,
                                 int64_t bh, int64_t k0, int warp, const Bf16* q_tile,
                                 const Bf16* do_tile, Bf16* k_tile, Bf16* v_tile, float* scores,
                                 float* dprobs) {
  __syncthreads();
  load_rows<D>(k, bh, s.heads, s.t, k0, kKeyStep, k_tile);
  load_rows<D>(v, bh, s.heads, s.t, k0, kKeyStep, v_tile);
  __syncthreads();
  for (int n = 0; n < kKeyStep; n += 16) {
    product_abt<D>(q_tile + 16 * warp * D, k_tile + n * D, scores + 16 * warp * kKeyStep + n,
                   kKeyStep);
    product_abt<D>(do_tile + 16 * warp * D, v_tile + n * D, dprobs + 16 * warp * kKeyStep + n,
                   kKeyStep);
  }
  __syncwarp();
}

// See Note [Fused attention on CUDA]: dq, and each row's logsumexp and delta.
template <int D>
__global__ void __launch_bounds__(kBlockThreads, 1)
    fused_attention_dq_kernel(InMatrix q, InMatrix k, InMatrix v, InMatrix dout, AttentionShape s,
                              OutMatrix dq, float* lse, float* delta) {
  alignas(32) __shared__ Bf16 q_tile[kRowTile * D];
  alignas(32) __shared__ Bf16 do_tile[kRowTile * D];
  alignas(32) __shared__ Bf16 k_tile[kKeyStep * D];
  alignas(32) __shared__ Bf16 v_tile[kKeyStep * D];
  alignas(32) __shared__ float scores[kRowTile * kKeyStep];
  alignas(32) __shared__ float dprobs[kRowTile * kKeyStep];
  alignas(32) __shared__ Bf16 dscores[kRowTile * kKeyStep];
  const int64_t bh = blockIdx.y, first = static_cast<int64_t>(blockIdx.x) * kRowTile;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int row = 16 * warp + lane / 2, half = lane % 2;
  const int64_t query = first + row;
  load_rows<D>(q, bh, s.heads, s.t, first, kRowTile, q_tile);
  load_rows<D>(dout, bh, s.heads, s.t, first, kRowTile, do_tile);
  const int64_t key_end = key_end_of(s, first);
  // Pass 1: m, l and sum_j exp(s - m) dP, rescaled as m grows.
  float m = -INFINITY, l = 0.0f, pd = 0.0f;
  for (int64_t k0 = 0; k0 < key_end; k0 += kKeyStep) {
    dq_step_products<D>(k, v, s, bh, k0, warp, q_tile, do_tile, k_tile, v_tile, scores, dprobs);
    float* s_row = scores + row * kKeyStep + 16 * half;  // scaled and masked in place
    const float* dp_row = dprobs + row * kKeyStep + 16 * half;
    const float m_new = fmaxf(m, scale_mask_and_max(s_row, s, bh, query, k0 + 16 * half));
    const float alpha = m_new == -INFINITY ? 1.0f : __expf(m - m_new);
    float sum = 0.0f, sum_pd = 0.0f;
    for (int c = 0; c < 16; ++c) {
      const float p = s_row[c] == -INFINITY ? 0.0f : __expf(s_row[c] - m_new);
      sum += p;
      sum_pd += p * dp_row[c];
    }
    sum += __shfl_xor_sync(kFullWarp, sum, 1);
    sum_pd += __shfl_xor_sync(kFullWarp, sum_pd, 1);
    l = l * alpha + sum;
    pd = pd * alpha + sum_pd;
    m = m_new;
  }
  // A row that sees no key has P = 0 everywhere: logsumexp +inf makes every exp 0.
  const float row_lse = l > 0.0f ? m + logf(l) : INFINITY;
  const float row_delta = l > 0.0f ? pd / l : 0.0f;
  if (half == 0 && query < s.t) {
    lse[bh * s.t + query] = row_lse;
    delta[bh * s.t + query] = row_delta;
  }
  // Pass 2: dS and dQ += dS K.
  FragAcc acc[D / 16];
  LS_UNROLL
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
  for (int64_t k0 = 0; k0 < key_end; k0 += kKeyStep) {
    dq_step_products<D>(k, v, s, bh, k0, warp, q_tile, do_tile, k_tile, v_tile, scores, dprobs);
    const float* s_row = scores + row * kKeyStep + 16 * half;
    const float* dp_row = dprobs + row * kKeyStep + 16 * half;
    Bf16* ds_row = dscores + row * kKeyStep + 16 * half;
    for (int c = 0; c < 16; ++c) {
      const bool seen = key_visible(s, bh, query, k0 + 16 * half + c);
      const float p = seen ? __expf(s_row[c] * s.scale - row_lse) : 0.0f;
      ds_row[c] = __float2bfloat16(p * (dp_row[c] - row_delta) * s.scale);
    }
    __syncwarp();
    accumulate_ab<D, kKeyStep>(acc, dscores + 16 * warp * kKeyStep, kKeyStep, k_tile);
  }
  __syncthreads();  // scores becomes each warp's staging
  write_rows<D>(acc, scores + 256 * warp, dq, bh, s.heads, s.t, first + 16 * warp);
}

// See Note [Fused attention on CUDA]: dk and dv.
template <int D>
__global__ void __launch_bounds__(kBlockThreads, 1)
    fused_attention_dkdv_kernel(InMatrix q, InMatrix k, InMatrix v, InMatrix dout,
                                AttentionShape s, const float* lse, const float* delta,
                                OutMatrix dk, OutMatrix dv) {
  alignas(32) __shared__ Bf16 k_tile[kRowTile * D];
  alignas(32) __shared__ Bf16 v_tile[kRowTile * D];
  alignas(32) __shared__ Bf16 q_tile[kQueryStep * D];
  alignas(32) __shared__ Bf16 do_tile[kQueryStep * D];
  alignas(32) __shared__ float scores_t[kRowTile * kQueryStep];  // [key][query]
  alignas(32) __shared__ float dprobs_t[kRowTile * kQueryStep];
  alignas(32) __shared__ Bf16 probs_t[kRowTile * kQueryStep];
  alignas(32) __shared__ Bf16 dscores_t[kRowTile * kQueryStep];
  alignas(32) __shared__ float step_lse[kQueryStep];
  alignas(32) __shared__ float step_delta[kQueryStep];
  const int64_t bh = blockIdx.y, first = static_cast<int64_t>(blockIdx.x) * kRowTile;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // Lanes 2r and 2r + 1 own key row r of the warp's 16, 8 queries each.
  const int key_row = 16 * warp + lane / 2, half = lane % 2;
  const int64_t key = first + key_row;
  load_rows<D>(k, bh, s.heads, s.t, first, kRowTile, k_tile);
  load_rows<D>(v, bh, s.heads, s.t, first, kRowTile, v_tile);
  FragAcc dk_acc[D / 16], dv_acc[D / 16];
  LS_UNROLL
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  // Causal: queries before the block's first key see none of its keys.
  const int64_t query_begin = s.causal ? first / kQueryStep * kQueryStep : 0;
  for (int64_t q0 = query_begin; q0 < s.t; q0 += kQueryStep) {
    __syncthreads();
    load_rows<D>(q, bh, s.heads, s.t, q0, kQueryStep, q_tile);
    load_rows<D>(dout, bh, s.heads, s.t, q0, kQueryStep, do_tile);
    if (threadIdx.x < kQueryStep) {
      const int64_t query = q0 + threadIdx.x;
      step_lse[threadIdx.x] = query < s.t ? lse[bh * s.t + query] : INFINITY;
      step_delta[threadIdx.x] = query < s.t ? delta[bh * s.t + query] : 0.0f;
    }
    __syncthreads();
    product_abt<D>(k_tile + 16 * warp * D, q_tile, scores_t + 16 * warp * kQueryStep, kQueryStep);
    product_abt<D>(v_tile + 16 * warp * D, do_tile, dprobs_t + 16 * warp * kQueryStep, kQueryStep);
    __syncwarp();
    for (int c = 8 * half; c < 8 * half + 8; ++c) {
      const int e = key_row * kQueryStep + c;
      const bool seen = key_visible(s, bh, q0 + c, key);
      const float p = seen ? __expf(scores_t[e] * s.scale - step_lse[c]) : 0.0f;
      probs_t[e] = __float2bfloat16(p);
      dscores_t[e] = __float2bfloat16(p * (dprobs_t[e] - step_delta[c]) * s.scale);
    }
    __syncwarp();
    accumulate_ab<D, kQueryStep>(dv_acc, probs_t + 16 * warp * kQueryStep, kQueryStep, do_tile);
    accumulate_ab<D, kQueryStep>(dk_acc, dscores_t + 16 * warp * kQueryStep, kQueryStep, q_tile);
  }
  __syncthreads();  // scores_t and dprobs_t become each warp's staging
  write_rows<D>(dk_acc, scores_t + 256 * warp, dk, bh, s.heads, s.t, first + 16 * warp);
  write_rows<D>(dv_acc, dprobs_t + 256 * warp, dv, bh, s.heads, s.t, first + 16 * warp);
}

bool supports(int64_t d, bool bf16) { return bf16 && (d == 16 || d == 32 || d == 64); }

void check_supported(const char* op, int64_t batch_heads, int64_t d, bool bf16) {
  LS_CHECK(supports(d, bf16), op, " on CUDA takes bf16 operands with head dim 16, 32 or 64 (got ",
           bf16 ? "bf16" : "f32", ", head dim ", d,
           "); nn::attention runs the unfused ops for the others");
  LS_CHECK(batch_heads <= 65535, op, ": ", batch_heads,
           " batch * heads matrices is more than one launch takes (65,535); split the batch");
}

dim3 grid_of(int64_t t, int64_t batch_heads) {
  return dim3(static_cast<unsigned>((t + kRowTile - 1) / kRowTile),
              static_cast<unsigned>(batch_heads));
}

// The q, k, v, dout (inputs) and out, dq, dk, dv (outputs) of one call, in either layout.
struct Operands {
  InMatrix q, k, v, dout;
  OutMatrix out, dq, dk, dv;
};

// Head-major [B*H, T, D] bf16 operands and f32 results (the fused_attention slots).
Operands head_major(const void* q, const void* k, const void* v, const void* dout, float* out,
                    float* dq, float* dk, float* dv, int64_t heads, int64_t t, int64_t d) {
  const int64_t batch = heads * t * d, head = t * d;
  const auto in = [&](const void* p) { return InMatrix{p, d, batch, head, false}; };
  const auto result = [&](float* p) { return OutMatrix{p, d, batch, head, false}; };
  return {in(q), in(k), in(v), in(dout), result(out), result(dq), result(dk), result(dv)};
}

// The packed f32 projections [B*T, 3*H*D] (q, k, v side by side in each token's row) and the
// context [B*T, H*D] (the packed_attention slots); dqkv like qkv, added to when accumulate, or
// dqkv16 instead: in bf16.
Operands packed(const float* qkv, const float* dout, float* out, uint16_t* out16, float* dqkv,
                uint16_t* dqkv16, bool accumulate, int64_t heads, int64_t t, int64_t d) {
  const int64_t c = heads * d;
  const auto in = [&](const float* p, int64_t width) {
    return InMatrix{p, width, t * width, d, true};
  };
  const auto result = [&](float* p, int64_t width, bool add) {
    return OutMatrix{p, width, t * width, d, add};
  };
  OutMatrix context = result(out, c, false);
  context.base16 = out16;
  // Group g (0: q, 1: k, 2: v) of dqkv, f32 or bf16.
  const auto gradient = [&](int64_t g) {
    OutMatrix m = result(dqkv == nullptr ? nullptr : dqkv + g * c, 3 * c, accumulate);
    m.base16 = dqkv16 == nullptr ? nullptr : dqkv16 + g * c;
    return m;
  };
  return {
      in(qkv, 3 * c), in(qkv + c, 3 * c), in(qkv + 2 * c, 3 * c), in(dout, c), context, gradient(0),
      gradient(1),    gradient(2)};
}

template <int D>
void launch_forward(const Operands& o, const AttentionShape& s, int64_t batch_heads,
                    cudaStream_t stream) {
  LS_LAUNCH(fused_attention_forward_kernel<D>, grid_of(s.t, batch_heads), kBlockThreads, 0, stream,
            o.q, o.k, o.v, s, o.out);
  LS_CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_backward(const Operands& o, const AttentionShape& s, int64_t batch_heads, float* lse,
                     float* delta, cudaStream_t stream) {
  LS_LAUNCH(fused_attention_dq_kernel<D>, grid_of(s.t, batch_heads), kBlockThreads, 0, stream, o.q,
            o.k, o.v, o.dout, s, o.dq, lse, delta);
  LS_CUDA_CHECK_LAUNCH();
  LS_LAUNCH(fused_attention_dkdv_kernel<D>, grid_of(s.t, batch_heads), kBlockThreads, 0, stream,
            o.q, o.k, o.v, o.dout, s, lse, delta, o.dk, o.dv);
  LS_CUDA_CHECK_LAUNCH();
}

void forward(const Operands& o, const AttentionShape& s, int64_t batch_heads, int64_t d,
             Stream& on) {
  const CudaLaunch launch(on);
  if (batch_heads == 0 || s.t == 0) return;
  switch (d) {
    case 16: return launch_forward<16>(o, s, batch_heads, launch.stream());
    case 32: return launch_forward<32>(o, s, batch_heads, launch.stream());
    default: return launch_forward<64>(o, s, batch_heads, launch.stream());
  }
}

void backward(const Operands& o, const AttentionShape& s, int64_t batch_heads, int64_t d,
              Stream& on) {
  const CudaLaunch launch(on);
  if (batch_heads == 0 || s.t == 0) return;
  // Each row's logsumexp and delta, from the dq kernel to the dk/dv kernel.
  const CudaScratch stats(launch.device(),
                          sizeof(float) * 2 * static_cast<size_t>(batch_heads * s.t));
  float* lse = stats.f32();
  float* delta = lse + batch_heads * s.t;
  switch (d) {
    case 16: return launch_backward<16>(o, s, batch_heads, lse, delta, launch.stream());
    case 32: return launch_backward<32>(o, s, batch_heads, lse, delta, launch.stream());
    default: return launch_backward<64>(o, s, batch_heads, lse, delta, launch.stream());
  }
}

// block_rows is the host kernels' knob; these kernels' tiles are fixed, so it is ignored.
void fused_attention(const void* q, const void* k, const void* v, bool bf16,
                     const int32_t* key_valid, int64_t batch_heads, int64_t heads, int64_t t,
                     int64_t d, bool causal, float scale, int64_t /*block_rows*/, float* out,
                     Stream& on) {
  check_supported("fused_attention", batch_heads, d, bf16);
  forward(head_major(q, k, v, nullptr, out, nullptr, nullptr, nullptr, heads, t, d),
          {t, heads, causal, scale, key_valid}, batch_heads, d, on);
}

void fused_attention_backward(const void* q, const void* k, const void* v, const void* dout,
                              bool bf16, const int32_t* key_valid, int64_t batch_heads,
                              int64_t heads, int64_t t, int64_t d, bool causal, float scale,
                              int64_t /*block_rows*/, float* dq, float* dk, float* dv, Stream& on) {
  check_supported("fused_attention_backward", batch_heads, d, bf16);
  backward(head_major(q, k, v, dout, nullptr, dq, dk, dv, heads, t, d),
           {t, heads, causal, scale, key_valid}, batch_heads, d, on);
}

void packed_attention(const float* qkv, const int32_t* key_valid, int64_t batch, int64_t heads,
                      int64_t t, int64_t d, bool causal, float scale, float* out, uint16_t* out16,
                      Stream& on) {
  check_supported("packed_attention", batch * heads, d, true);
  forward(packed(qkv, nullptr, out, out16, nullptr, nullptr, false, heads, t, d),
          {t, heads, causal, scale, key_valid}, batch * heads, d, on);
}

void packed_attention_backward(const float* qkv, const float* dout, const int32_t* key_valid,
                               int64_t batch, int64_t heads, int64_t t, int64_t d, bool causal,
                               float scale, float* dqkv, uint16_t* dqkv16, bool accumulate,
                               Stream& on) {
  check_supported("packed_attention_backward", batch * heads, d, true);
  backward(packed(qkv, dout, nullptr, nullptr, dqkv, dqkv16, accumulate, heads, t, d),
           {t, heads, causal, scale, key_valid}, batch * heads, d, on);
}

}  // namespace

// The attention table's fused slots, filled here (ops/cuda/attention.cu fills the others).
const FusedAttentionOps kCudaFusedAttention{
    .fused_attention = fused_attention,
    .fused_attention_backward = fused_attention_backward,
    .supports = supports,
    .packed_attention = packed_attention,
    .packed_attention_backward = packed_attention_backward,
};
LS_REGISTER_OP_TABLE(FusedAttentionOps, DeviceKind::kCuda, kCudaFusedAttention);

}  // namespace ls::cuda_ops
