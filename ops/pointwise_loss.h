// Losses that are a sum over elements of a function of one prediction and one target: squared
// error (regression) and binary cross-entropy on logits (multi-label classification).
// Kernels: ops/host/pointwise_loss.cpp, ops/cuda/pointwise_loss.cu.
//
// pointwise_loss_sum: sum (f32 [1]) = sum over i of l(pred[i], target[i]), accumulated in double
// in a fixed order (blocks of kPointwiseLossBlock elements, then the blocks in order), so the
// result is bitwise repeatable on each backend and does not depend on how work is split.
// pointwise_loss_backward: dpred[i] (+)= l'(pred[i], target[i]) * *seed, seed an f32 [1] read on
// the device when the kernel runs (the step's loss scale / global count).
//   kSquaredError:  l = (p - t)^2,                          l' = 2 (p - t)
//   kBceWithLogits: l = max(p, 0) - p t + log(1 + e^-|p|),   l' = sigmoid(p) - t
// (the stable form PyTorch's BCEWithLogitsLoss uses; targets are probabilities in [0, 1]).
// pred and target are f32 of the same shape; asynchronous in stream order.
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

enum class PointwiseLoss : int32_t { kSquaredError, kBceWithLogits };

inline const char* pointwise_loss_name(PointwiseLoss kind) {
  return kind == PointwiseLoss::kSquaredError ? "squared_error" : "bce_with_logits";
}

// Elements per block of the fixed summation order (both backends).
inline constexpr int64_t kPointwiseLossBlock = 4096;

struct PointwiseLossOps {
  // *sum = sum_i l(pred[i], target[i]), n >= 0 (0 elements: 0).
  void (*loss_sum)(PointwiseLoss kind, const float* pred, const float* target, int64_t n,
                   float* sum, Stream& stream) = nullptr;
  // dpred[i] = (accumulate ? dpred[i] : 0) + l'(pred[i], target[i]) * *seed.
  void (*loss_backward)(PointwiseLoss kind, const float* pred, const float* target, int64_t n,
                        const float* seed, float* dpred, bool accumulate,
                        Stream& stream) = nullptr;
};

namespace detail {
inline void check_pred_target(const char* op, const Tensor& pred, const Tensor& target,
                              const Stream& stream) {
  op_check::tensor(op, "pred", pred, DType::kF32, stream);
  op_check::tensor(op, "target", target, DType::kF32, stream);
  LS_CHECK(pred.shape() == target.shape(), op, ": target is ", target.describe(),
           "; expected the shape of the prediction (", pred.describe(), ")");
}
}  // namespace detail

inline void pointwise_loss_sum(PointwiseLoss kind, const Tensor& pred, const Tensor& target,
                               const Tensor& sum, Stream& stream) {
  const char* op = pointwise_loss_name(kind);
  detail::check_pred_target(op, pred, target, stream);
  op_check::tensor(op, "sum", sum, DType::kF32, stream);
  op_check::scalar(op, "sum", sum);
  op_entry(&PointwiseLossOps::loss_sum, op, stream, [&] {
    // Fixed blocks of partial sums, then one block adds them (ops/cuda/pointwise_loss.cu).
    return OpLaunches{ledger::moves("loss_block_sums_kernel", {&pred, &target}),
                      ledger::moves("loss_total_kernel", {&sum})};
  })(kind, pred.f32(), target.f32(), pred.numel(), sum.f32(), stream);
}

inline void pointwise_loss_backward(PointwiseLoss kind, const Tensor& pred, const Tensor& target,
                                    const Tensor& seed, const Tensor& dpred, bool accumulate,
                                    Stream& stream) {
  const char* op = pointwise_loss_name(kind);
  detail::check_pred_target(op, pred, target, stream);
  op_check::tensor(op, "seed", seed, DType::kF32, stream);
  op_check::scalar(op, "seed", seed);
  op_check::tensor(op, "dpred", dpred, DType::kF32, stream);
  LS_CHECK(dpred.shape() == pred.shape(), op, ": dpred is ", dpred.describe(),
           "; expected the shape of the prediction (", pred.describe(), ")");
  op_entry(&PointwiseLossOps::loss_backward, op, stream, [&] {
    return OpLaunches{ledger::moves("loss_backward_kernel",
                                    {&pred, &target, &dpred, accumulate ? &dpred : nullptr})};
  })(kind, pred.f32(), target.f32(), pred.numel(), seed.f32(), dpred.f32(), accumulate, stream);
}

}  // namespace ls
