// Host GEMM through oneDNN and CBLAS (OpenBLAS), the host kernel of ops/gemm.h.
// Each host device owns its cores and splits a GEMM itself, by rows of C over host_parallel_for
// (gemm_strided_batched: by matrices), one library call per chunk on the calling thread; both
// libraries are kept to one thread per caller, so N devices never oversubscribe the machine.
// Chunk boundaries depend only on (m or batch, threads), so results are reproducible for a given
// thread count; they may differ in the last bits between thread counts, because the libraries
// pick their kernels by the size of each call.
// f32: oneDNN where it measured faster (onednn::f32_faster: every transformer-step shape on an
// AVX-512 CPU), cblas_sgemm otherwise (small shapes, builds without oneDNN).
// bf16 on a CPU with bf16 units (and a build with oneDNN): A and B are rounded into dense
// per-thread bf16 copies and multiplied by oneDNN on those units with f32 accumulation
// (ops/host/onednn_matmul.h). Otherwise (f16, or bf16 without the units): A and B are rounded
// into per-thread f32 scratch copies, then multiplied in f32 as above. Both are what cuBLAS
// computes with 16-bit operands and f32 accumulation (lockstep/precision.h); they differ from
// each other only in the order of the f32 sums.
#include "ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include <lockstep/dtype.h>
#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "ops/host/bf16_convert.h"
#include "ops/host/host_gemm.h"
#include "ops/host/host_ops.h"
#include "ops/host/onednn_matmul.h"

namespace ls {
namespace {

// Below this many multiply-adds a GEMM runs as one call: splitting costs more than it saves.
constexpr int64_t kMinSplitFlops = int64_t{1} << 18;
// Fewest rows of C per chunk, so that each call still fills the libraries' register tiles.
constexpr int64_t kMinRowsPerChunk = 16;

void ensure_single_threaded_blas() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// Note [OpenBLAS on CPUs newer than it]
// OpenBLAS picks its kernels for the CPU when it loads; a CPU its version does not know gets the
// generic "Prescott" (SSE3) kernels. Debian 12's OpenBLAS 0.3.21 does that on an Intel Xeon of
// family 6 model 207 (AMX, 2023): cblas_sgemm at 1024^3 ran at 27 GFLOP/s there, 121-149 with
// OPENBLAS_CORETYPE=CooperLake or SkylakeX (docs/benchmarks.md). That variable must be set before
// the program starts, so lockstep instead sends every f32 product to oneDNN, which knows the CPU,
// when OpenBLAS runs its generic kernels and oneDNN's f32 is available.
bool openblas_generic() {
  static const bool generic = [] {
    const char* core = openblas_get_corename();
    return core != nullptr && std::string_view(core) == "Prescott";
  }();
  return generic;
}

// C = beta * C, with BLAS's rule that beta == 0 overwrites (NaN/Inf in C do not propagate).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

// One oneDNN call on the calling thread: `batch` products C_i = alpha op(A_i) op(B_i) + beta C_i
// with A and B of `type`, matrix i of X at x + i * stride_x.
void onednn_product(onednn::OperandType type, bool trans_a, bool trans_b, int64_t batch, int64_t m,
                    int64_t n, int64_t k, float alpha, const void* a, int64_t lda,
                    int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, float beta,
                    float* c, int64_t ldc, int64_t stride_c) {
  const onednn::MatmulShape shape{.operands = type,
                                  .trans_a = trans_a,
                                  .trans_b = trans_b,
                                  .batch = batch,
                                  .m = m,
                                  .n = n,
                                  .k = k,
                                  .lda = lda,
                                  .ldb = ldb,
                                  .ldc = ldc,
                                  .stride_a = stride_a,
                                  .stride_b = stride_b,
                                  .stride_c = stride_c,
                                  .alpha = alpha,
                                  .beta = beta};
  onednn::matmul(shape, a, b, c);
}

// `batch` f32 products on the calling thread (matrix i of X at x + i * stride_x): one oneDNN
// call where it measured faster (onednn::f32_faster, or every shape where OpenBLAS runs generic
// kernels: Note [OpenBLAS on CPUs newer than it]), else one cblas_sgemm per matrix.
void sgemm_batch(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                 float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                 int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                 int64_t stride_c) {
  // oneDNN takes matrices that do not overlap (a stride of 0 broadcasts in BLAS loops only).
  const bool apart = stride_a >= (trans_a ? k : m) * lda && stride_b >= (trans_b ? n : k) * ldb &&
                     stride_c >= m * ldc;
  const bool onednn = onednn::f32_faster(m, n, k) || (onednn::f32_enabled() && openblas_generic());
  if (apart && onednn) {
    onednn_product(onednn::OperandType::kF32, trans_a, trans_b, batch, m, n, k, alpha, a, lda,
                   stride_a, b, ldb, stride_b, beta, c, ldc, stride_c);
    return;
  }
  for (int64_t i = 0; i < batch; ++i) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
                static_cast<blasint>(n), static_cast<blasint>(k), alpha, a + i * stride_a,
                static_cast<blasint>(lda), b + i * stride_b, static_cast<blasint>(ldb), beta,
                c + i * stride_c, static_cast<blasint>(ldc));
  }
}

// Elements a row-major operand of `rows` rows of `cols` used columns spans with leading
// dimension ld.
int64_t operand_span(int64_t rows, int64_t cols, int64_t ld) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

void sgemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  sgemm_batch(trans_a, trans_b, 1, m, n, k, alpha, a, lda, (trans_a ? k : m) * lda, b, ldb,
              (trans_b ? n : k) * ldb, beta, c, ldc, m * ldc);
}

// x[0, span) converted into `scratch` by convert_range(from, n, to), split over the device's cores.
template <typename To, typename From, typename ConvertRange>
const To* converted(const From* x, int64_t span, std::vector<To>& scratch,
                    ConvertRange convert_range) {
  scratch.resize(static_cast<size_t>(span));
  To* out = scratch.data();
  host_parallel_for(0, span, kHostGrain,
                    [=](int64_t b, int64_t e) { convert_range(x + b, e - b, out + b); });
  return out;
}

// The conversions run as whole-range loops of inlined bit arithmetic, so that they vectorise:
// passed as a function pointer per element they did not, and on a CPU without bf16 units (AVX2,
// where bf16 GEMMs are emulated in f32) widening took 27% of the bf16 GPT step (perf). Rounding
// to bf16 and widening are round_to_bf16_values and widen_bf16 (ops/host/bf16_convert.h).
void round_to_f16_range(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_f16(x[i]);
}

// The operand rounded to `precision` in `scratch` (the operand itself for kF32). Padding between
// rows is rounded too: harmless, it is never read.
const float* rounded(const float* x, int64_t span, Precision precision,
                     std::vector<float>& scratch) {
  switch (precision) {
    case Precision::kF32: return x;
    case Precision::kBF16: return converted(x, span, scratch, round_to_bf16_values);
    case Precision::kF16: return converted(x, span, scratch, round_to_f16_range);
  }
  return x;
}

// Scratch for the rounded operands, per stream worker thread: reused, so a step allocates nothing.
struct OperandScratch {
  std::vector<float> a, b;
};
OperandScratch& operand_scratch() {
  thread_local OperandScratch scratch;
  return scratch;
}

// bf16 bits widened to f32 in `scratch` (exact).
const float* widened(const uint16_t* x, int64_t span, std::vector<float>& scratch) {
  return converted(x, span, scratch, widen_bf16);
}

// ---- bf16 on the CPU's bf16 units (oneDNN) ----

// `count` matrices of rows x cols, matrix i at x + i * stride with leading dimension ld, rounded
// to bf16 into one dense block (leading dimension cols, matrix stride rows * cols).
const uint16_t* pack_bf16(const float* x, int64_t count, int64_t rows, int64_t cols, int64_t ld,
                          int64_t stride, std::vector<uint16_t>& scratch) {
  scratch.resize(static_cast<size_t>(count * rows * cols));
  uint16_t* out = scratch.data();
  const int64_t grain = std::max<int64_t>(1, kHostGrain / std::max<int64_t>(1, cols));
  host_parallel_for(0, count * rows, grain, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t matrix = r / rows, row = r % rows;
      round_to_bf16(x + matrix * stride + row * ld, cols, out + r * cols);
    }
  });
  return out;
}

struct Bf16Scratch {
  std::vector<uint16_t> a, b;
};
Bf16Scratch& bf16_scratch() {
  thread_local Bf16Scratch scratch;
  return scratch;
}

// C = alpha * op(A) op(B) + beta * C on bf16 operands, `batch` products at the given strides, on
// the calling thread (one oneDNN call).
void native_bf16(bool trans_a, bool trans_b, int64_t batch, int64_t m, int64_t n, int64_t k,
                 float alpha, const uint16_t* a, int64_t lda, int64_t stride_a, const uint16_t* b,
                 int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                 int64_t stride_c) {
  onednn_product(onednn::OperandType::kBF16, trans_a, trans_b, batch, m, n, k, alpha, a, lda,
                 stride_a, b, ldb, stride_b, beta, c, ldc, stride_c);
}

bool use_native_bf16(Precision precision) {
  return precision == Precision::kBF16 && onednn::native_bf16_enabled();
}

// C = alpha * op(A) op(B) + beta * C on bf16 operands A and B (leading dimensions lda, ldb), on
// the bf16 units, split over rows of C like the f32 GEMM. Runs on the stream's worker.
void native_bf16_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      float* c, int64_t ldc) {
  const int64_t a_rows = trans_a ? k : m, b_rows = trans_b ? n : k;
  const int64_t threads = host_current_threads();
  if (threads <= 1 || m < 2 * kMinRowsPerChunk || m * n * k < kMinSplitFlops) {
    native_bf16(trans_a, trans_b, 1, m, n, k, alpha, a, lda, a_rows * lda, b, ldb, b_rows * ldb,
                beta, c, ldc, m * ldc);
    return;
  }
  const int64_t grain = std::max(kMinRowsPerChunk, (m + threads - 1) / threads);
  host_parallel_for(0, m, grain, [=](int64_t r0, int64_t r1) {
    const uint16_t* a_rows_ptr = trans_a ? a + r0 : a + r0 * lda;
    native_bf16(trans_a, trans_b, 1, r1 - r0, n, k, alpha, a_rows_ptr, lda, a_rows * lda, b, ldb,
                b_rows * ldb, beta, c + r0 * ldc, ldc, (r1 - r0) * ldc);
  });
}

void gemm_native_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const float* a_in, int64_t lda, const float* b_in, int64_t ldb, float beta,
                      float* c, int64_t ldc, Stream& stream) {
  host_enqueue(stream, [=] {
    if (k == 0 || alpha == 0.0f) {
      scale_c(m, n, beta, c, ldc);
      return;
    }
    // The copies are dense: a stored (trans_a ? k x m : m x k) gets leading dimension = its cols.
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    Bf16Scratch& scratch = bf16_scratch();
    const uint16_t* a = pack_bf16(a_in, 1, a_rows, a_cols, lda, 0, scratch.a);
    const uint16_t* b = pack_bf16(b_in, 1, b_rows, b_cols, ldb, 0, scratch.b);
    native_bf16_rows(trans_a, trans_b, m, n, k, alpha, a, a_cols, b, b_cols, beta, c, ldc);
  });
}

// Matrices per chunk when a batched GEMM is split over the batch: enough that each chunk is worth
// a task.
int64_t batch_grain(int64_t m, int64_t n, int64_t k) {
  return std::max<int64_t>(1, kMinSplitFlops / std::max<int64_t>(1, m * n * k));
}

// `batch` products on bf16 operands on the bf16 units, split over the batch; on the worker.
void native_bf16_batches(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                         float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                         const uint16_t* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                         int64_t ldc, int64_t stride_c, int64_t batch) {
  host_parallel_for(0, batch, batch_grain(m, n, k), [=](int64_t i0, int64_t i1) {
    native_bf16(trans_a, trans_b, i1 - i0, m, n, k, alpha, a + i0 * stride_a, lda, stride_a,
                b + i0 * stride_b, ldb, stride_b, beta, c + i0 * stride_c, ldc, stride_c);
  });
}

void gemm_strided_batched_native_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                      float alpha, const float* a_in, int64_t lda,
                                      int64_t stride_a, const float* b_in, int64_t ldb,
                                      int64_t stride_b, float beta, float* c, int64_t ldc,
                                      int64_t stride_c, int64_t batch, Stream& stream) {
  host_enqueue(stream, [=] {
    if (k == 0 || alpha == 0.0f) {
      for (int64_t i = 0; i < batch; ++i) scale_c(m, n, beta, c + i * stride_c, ldc);
      return;
    }
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    Bf16Scratch& scratch = bf16_scratch();
    const uint16_t* a = pack_bf16(a_in, batch, a_rows, a_cols, lda, stride_a, scratch.a);
    const uint16_t* b = pack_bf16(b_in, batch, b_rows, b_cols, ldb, stride_b, scratch.b);
    native_bf16_batches(trans_a, trans_b, m, n, k, alpha, a, a_cols, a_rows * a_cols, b, b_cols,
                        b_rows * b_cols, beta, c, ldc, stride_c, batch);
  });
}

// ---- f32, and 16-bit operands emulated in f32 ----

// C = alpha * op(A) op(B) + beta * C in f32, split over rows of C; runs on the stream's worker.
void sgemm_split(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  // BLAS rejects k == 0 (lda < 1); the result is then just beta * C.
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  const int64_t threads = host_current_threads();
  if (threads <= 1 || m < 2 * kMinRowsPerChunk || m * n * k < kMinSplitFlops) {
    sgemm_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // One chunk of rows per core: fewer, larger calls are what the libraries are fast at.
  const int64_t grain = std::max(kMinRowsPerChunk, (m + threads - 1) / threads);
  host_parallel_for(0, m, grain, [=](int64_t r0, int64_t r1) {
    // Row r of op(A) is row r of A, or column r of A when A is stored transposed (k x m).
    const float* a_rows = trans_a ? a + r0 : a + r0 * lda;
    sgemm_rows(trans_a, trans_b, r1 - r0, n, k, alpha, a_rows, lda, b, ldb, beta, c + r0 * ldc,
               ldc);
  });
}

// `batch` f32 products split over the batch; runs on the stream's worker.
void sgemm_batches(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, int64_t stride_a, const float* b, int64_t ldb,
                   int64_t stride_b, float beta, float* c, int64_t ldc, int64_t stride_c,
                   int64_t batch) {
  host_parallel_for(0, batch, batch_grain(m, n, k), [=](int64_t i0, int64_t i1) {
    if (k == 0 || alpha == 0.0f) {  // BLAS rejects k == 0; the result is beta * C
      for (int64_t i = i0; i < i1; ++i) scale_c(m, n, beta, c + i * stride_c, ldc);
      return;
    }
    sgemm_batch(trans_a, trans_b, i1 - i0, m, n, k, alpha, a + i0 * stride_a, lda, stride_a,
                b + i0 * stride_b, ldb, stride_b, beta, c + i0 * stride_c, ldc, stride_c);
  });
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a_in, int64_t lda, const float* b_in, int64_t ldb, float beta, float* c,
          int64_t ldc, Precision precision, Stream& stream) {
  LS_ASSERT(m >= 0 && n >= 0 && k >= 0, "gemm sizes m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  if (use_native_bf16(precision)) {
    gemm_native_bf16(trans_a, trans_b, m, n, k, alpha, a_in, lda, b_in, ldb, beta, c, ldc, stream);
    return;
  }
  ensure_single_threaded_blas();
  host_enqueue(stream, [=] {
    OperandScratch& scratch = operand_scratch();
    const float* a =
        rounded(a_in, operand_span(trans_a ? k : m, trans_a ? m : k, lda), precision, scratch.a);
    const float* b =
        rounded(b_in, operand_span(trans_b ? n : k, trans_b ? k : n, ldb), precision, scratch.b);
    sgemm_split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a_in, int64_t lda, int64_t stride_a, const float* b_in,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch, Precision precision, Stream& stream) {
  LS_ASSERT(m >= 0 && n >= 0 && k >= 0 && batch >= 0, "gemm_strided_batched sizes m=", m, " n=", n,
            " k=", k, " batch=", batch);
  if (m == 0 || n == 0 || batch == 0) return;
  if (use_native_bf16(precision)) {
    gemm_strided_batched_native_bf16(trans_a, trans_b, m, n, k, alpha, a_in, lda, stride_a, b_in,
                                     ldb, stride_b, beta, c, ldc, stride_c, batch, stream);
    return;
  }
  ensure_single_threaded_blas();
  host_enqueue(stream, [=] {
    OperandScratch& scratch = operand_scratch();
    const float* a =
        rounded(a_in, (batch - 1) * stride_a + operand_span(trans_a ? k : m, trans_a ? m : k, lda),
                precision, scratch.a);
    const float* b =
        rounded(b_in, (batch - 1) * stride_b + operand_span(trans_b ? n : k, trans_b ? k : n, ldb),
                precision, scratch.b);
    sgemm_batches(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c,
                  ldc, stride_c, batch);
  });
}

// Operands already in bf16: straight to the bf16 units; without them, widened to f32 (exact) and
// multiplied like the emulated path, which then gives the same bits as gemm(..., kBF16) on the
// f32 tensors these were cast from.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
               float* c, int64_t ldc, Stream& stream) {
  LS_ASSERT(m >= 0 && n >= 0 && k >= 0, "gemm_bf16 sizes m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  if (onednn::native_bf16_enabled()) {
    host_enqueue(stream, [=] {
      if (k == 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return;
      }
      native_bf16_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    });
    return;
  }
  ensure_single_threaded_blas();
  host_enqueue(stream, [=] {
    OperandScratch& scratch = operand_scratch();
    const float* a_wide =
        widened(a, operand_span(trans_a ? k : m, trans_a ? m : k, lda), scratch.a);
    const float* b_wide =
        widened(b, operand_span(trans_b ? n : k, trans_b ? k : n, ldb), scratch.b);
    sgemm_split(trans_a, trans_b, m, n, k, alpha, a_wide, lda, b_wide, ldb, beta, c, ldc);
  });
}

// The batched form of gemm_bf16.
void gemm_strided_batched_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                               const uint16_t* b, int64_t ldb, int64_t stride_b, float beta,
                               float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                               Stream& stream) {
  LS_ASSERT(m >= 0 && n >= 0 && k >= 0 && batch >= 0, "gemm_strided_batched_bf16 sizes m=", m,
            " n=", n, " k=", k, " batch=", batch);
  if (m == 0 || n == 0 || batch == 0) return;
  if (onednn::native_bf16_enabled()) {
    host_enqueue(stream, [=] {
      if (k == 0 || alpha == 0.0f) {
        for (int64_t i = 0; i < batch; ++i) scale_c(m, n, beta, c + i * stride_c, ldc);
        return;
      }
      native_bf16_batches(trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
                          beta, c, ldc, stride_c, batch);
    });
    return;
  }
  ensure_single_threaded_blas();
  host_enqueue(stream, [=] {
    OperandScratch& scratch = operand_scratch();
    const float* a_wide = widened(
        a, (batch - 1) * stride_a + operand_span(trans_a ? k : m, trans_a ? m : k, lda), scratch.a);
    const float* b_wide = widened(
        b, (batch - 1) * stride_b + operand_span(trans_b ? n : k, trans_b ? k : n, ldb), scratch.b);
    sgemm_batches(trans_a, trans_b, m, n, k, alpha, a_wide, lda, stride_a, b_wide, ldb, stride_b,
                  beta, c, ldc, stride_c, batch);
  });
}

const GemmOps kHostGemm{
    .gemm = gemm,
    .gemm_strided_batched = gemm_strided_batched,
    .gemm_bf16 = gemm_bf16,
    .gemm_strided_batched_bf16 = gemm_strided_batched_bf16,
};
LS_REGISTER_OP_TABLE(GemmOps, DeviceKind::kHost, kHostGemm);

}  // namespace

void host_gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  ensure_single_threaded_blas();
  sgemm_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void host_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                    float* c, int64_t ldc) {
  LS_ASSERT(onednn::native_bf16_enabled(), "host_gemm_bf16 without the CPU's bf16 units");
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    scale_c(m, n, beta, c, ldc);
    return;
  }
  native_bf16(trans_a, trans_b, 1, m, n, k, alpha, a, lda, (trans_a ? k : m) * lda, b, ldb,
              (trans_b ? n : k) * ldb, beta, c, ldc, m * ldc);
}
}  // namespace ls
