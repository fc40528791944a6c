// Matrix products through oneDNN's matmul primitive, for the host GEMM (ops/host/gemm.cpp): bf16
// operands with f32 accumulation and an f32 C on the CPU's bf16 dot-product units (AVX512-BF16,
// AMX), which Debian's OpenBLAS cannot use. This is the GPU's bf16 contract (cuBLAS with bf16 A
// and B, f32 C, CUBLAS_COMPUTE_32F): the operands are rounded to bf16, each product of two bf16
// values is exact in f32, and only the summation order differs from the emulated path.
//
// Primitives are built once per shape and kept per calling thread (oneDNN's primitive creation
// costs far more than a small GEMM). Each call runs on the calling thread alone: oneDNN's OpenMP
// team is set to one thread per caller, because a host device splits its GEMMs over its own cores
// (host_parallel_for) and N devices must not oversubscribe the machine.
// f32 products go through oneDNN too where it measured faster than OpenBLAS (f32_faster()).
// Built when CMake finds oneDNN (LOCKSTEP_ONEDNN, scripts/setup installs libdnnl-dev); without it
// nothing here is available, f32 runs on OpenBLAS and the host emulates bf16 as before.
#pragma once

#include <cstdint>
#include <string>

namespace ls::onednn {

enum class OperandType : uint8_t { kF32, kBF16 };

// One (batched) product C_i = alpha * op(A_i) op(B_i) + beta * C_i, row-major, as GemmOps has it:
// op(A) is m x k, stored m x k (lda >= k) or, trans_a, k x m (lda >= m); likewise B; C is f32.
// beta == 0 overwrites C. Matrix i of X starts stride_x elements after matrix i - 1.
struct MatmulShape {
  OperandType operands = OperandType::kBF16;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.0f, beta = 0.0f;

  bool operator==(const MatmulShape&) const = default;
};

// True when lockstep was built with oneDNN and this CPU has bf16 dot-product instructions.
bool native_bf16_available();
// True when lockstep was built with oneDNN and this CPU has AVX-512, where oneDNN's f32 matmul
// measured faster than OpenBLAS's sgemm on every GEMM shape of the transformer step (1.01-1.3x,
// docs/benchmarks.md) but not on the smallest ones (f32_faster()).
bool f32_available();

// Whether the host GEMM multiplies bf16 operands on the bf16 units (the default wherever
// native_bf16_available()) or emulates them (operands rounded, then an f32 GEMM), and whether
// f32 GEMMs may go through oneDNN (the default wherever f32_available()) or always through
// OpenBLAS. Process-wide. The environment variable LOCKSTEP_ONEDNN=off turns both off from the
// start (bf16 emulated as in a build without oneDNN); tests and lockstep-bench switch them to
// compare the paths in one run. Enabling one where it is not available raises ls::Error.
bool native_bf16_enabled();
void set_native_bf16_enabled(bool enabled);
// native_bf16_enabled() on a CPU with AMX-BF16 tiles, where oneDNN multiplies bf16 on them
// (brg:avx512_core_amx_bf16); ops/causal_gemm.h sizes its blocks for it.
bool bf16_on_amx();
bool f32_enabled();
void set_f32_enabled(bool enabled);

// Whether an f32 product of this shape is faster through oneDNN than through OpenBLAS on this
// machine (f32_enabled(), and not among the small shapes where OpenBLAS's lower call overhead
// wins: n < 16 or fewer than 2^18 multiply-adds; bench gemm/... measures both).
bool f32_faster(int64_t m, int64_t n, int64_t k);

// Runs the product on the calling thread. a and b hold float or uint16_t (bf16 bits) as
// shape.operands says. m, n, k, batch > 0. Raises ls::Error if oneDNN rejects the shape.
void matmul(const MatmulShape& shape, const void* a, const void* b, float* c);

// The implementation oneDNN picks for the shape, e.g. "brg:avx512_core_bf16" (benchmarks print
// it to show which units ran); "" without oneDNN.
std::string implementation(const MatmulShape& shape);

}  // namespace ls::onednn
