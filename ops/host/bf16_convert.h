// f32 -> bf16 rounding of whole arrays for the host's native bf16 GEMMs (ops/host/gemm.cpp), and
// the widening back. Rounding is to nearest, ties to even, NaN kept quiet, subnormals kept: bit for
// bit f32_to_bf16 (lockstep/dtype.h), which is what the GPU's conversion computes.
// On a CPU with AVX512-BF16 it runs on VCVTNE2PS2BF16, 32 values per instruction. That
// instruction flushes subnormal inputs to zero, so a block of 32 holding one is redone by the
// portable path: the result never depends on the instruction set.
#pragma once

#include <cstdint>

namespace ls {

// out[i] = f32_to_bf16(x[i]) for i in [0, n).
void round_to_bf16(const float* x, int64_t n, uint16_t* out);

// The same on the portable path alone (no AVX512-BF16), for tests and benchmarks.
void round_to_bf16_portable(const float* x, int64_t n, uint16_t* out);

// out[i] = bf16_to_f32(x[i]) for i in [0, n): exact, a shift, vectorised.
void widen_bf16(const uint16_t* x, int64_t n, float* out);

// out[i] = bf16_to_f32(f32_to_bf16(x[i])): x rounded to bf16 and kept in f32 (the operands of
// bf16 emulated in f32), vectorised; out may be x.
void round_to_bf16_values(const float* x, int64_t n, float* out);

}  // namespace ls
