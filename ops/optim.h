// One optimizer step over f32 tensors, fused into one pass, with PyTorch's semantics (SGD with
// L2 weight decay and momentum; AdamW with decoupled weight decay, see ops/kernels.h).
// param, grad and the state tensors must have the same element count and must not overlap; the
// state (momentum_buf, m, v) must start at zero. Asynchronous in stream order; bad arguments or
// hyper-parameters raise ls::Error at the call.
#pragma once

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "ops/kernels.h"

namespace ls {

// momentum_buf may be undefined when config.momentum == 0 (it is then ignored).
void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
              const SgdConfig& config, Stream& stream);
// step counts from 1 (the first step is 1), as PyTorch's bias correction does.
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWConfig& config, int64_t step, Stream& stream);

}  // namespace ls
