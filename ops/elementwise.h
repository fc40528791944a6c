// Element-wise utilities over whole tensors (shapes may differ; element counts must match),
// through the stream's kernel table. An output may be the same tensor as an input, never a
// partial overlap. Asynchronous in stream order; bad arguments raise ls::Error at the call.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace ls {

void count_nonfinite(const Tensor& x, const Tensor& count, Stream& stream);  // count: i32 [1]
void fill(const Tensor& x, float value, Stream& stream);                        // x = value (f32)
void scale(const Tensor& x, float alpha, Stream& stream);                       // x *= alpha (f32)
void axpy(float alpha, const Tensor& x, const Tensor& y, Stream& stream);       // y += alpha x
void add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream);  // out = a + b
// dst = src converted by the tensors' dtypes: f32 -> bf16 (round to nearest even, NaN stays
// NaN) or bf16 -> f32 (exact).
void cast(const Tensor& src, const Tensor& dst, Stream& stream);

}  // namespace ls
