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
// Built when CMake finds oneDNN (LOCKSTEP_ONEDNN, scripts/setup installs libdnnl-dev); without it
// native_bf16_available() is false and the host emulates bf16 as before.
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

// Whether the host GEMM multiplies bf16 operands on the bf16 units (the default wherever
// native_bf16_available()) or emulates them (operands rounded, then an f32 GEMM). Process-wide;
// tests and lockstep-bench switch it to compare the two in one run. Setting true where
// native_bf16_available() is false raises ls::Error.
bool native_bf16_enabled();
void set_native_bf16_enabled(bool enabled);

// Runs the product on the calling thread. a and b hold float or uint16_t (bf16 bits) as
// shape.operands says. m, n, k, batch > 0. Raises ls::Error if oneDNN rejects the shape.
void matmul(const MatmulShape& shape, const void* a, const void* b, float* c);

// The implementation oneDNN picks for the shape, e.g. "brg:avx512_core_bf16" (benchmarks print
// it to show which units ran); "" without oneDNN.
std::string implementation(const MatmulShape& shape);

}  // namespace ls::onednn
