// Softmax cross-entropy over the rows of f32 (or bf16) logits [rows, cols] with i32 class labels
// [rows].
// Kernels: ops/host/softmax_xent.cpp, ops/cuda/softmax_xent.cu.
//
// softmax_xent: loss (f32 [1]) = (sum over rows of -log softmax(logits[r])[labels[r]]) / rows;
// when dlogits (f32 [rows, cols]) is defined, dlogits = (softmax(logits) - onehot(labels)) *
// grad_scale (grad_scale = 1/rows gives the gradient of the loss), times *device_scale as well
// when one is given (a f32 [1] read when the kernel runs: the step's loss gradient scale, which
// lives on the device, ops/step_control.h). dlogits may be logits itself. dlogits may be bf16
// instead: the same values rounded (what a bf16 matrix product of the gradient multiplies), in
// the same pass, so the f32 gradient is never written nor read again (nn::cross_entropy in bf16).
// A row labelled kIgnoreLabel (-100, PyTorch's ignore_index) adds 0 to the sum and gets a 0
// gradient row; it still counts in `rows`, so loss * rows is the sum over the other rows.
// count_correct: correct (i32 [1]) = rows whose first maximum is at the label (ignored rows
// skipped). count_labels: count (i32 [1]) = labels that are not kIgnoreLabel.
// Shapes are checked at the call; labels are read on the device, so a label outside [0, cols)
// other than kIgnoreLabel is an error raised by the stream at its next synchronize()/check(), on
// every backend alike (CUDA through the stream's DeviceFault, engine/core/device_fault.h).
// Asynchronous in stream order.
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

// The label of a row that takes no part in the loss (padding, unlabelled tokens).
inline constexpr int32_t kIgnoreLabel = -100;

// The hint of the out-of-range label message, shared by both backends.
inline constexpr const char* kLabelHint =
    "labels must be class indices below the number of logits columns, or -100 (kIgnoreLabel) "
    "to skip a row";

struct SoftmaxXentOps {
  // *loss = sum_r -log softmax(logits[r])[labels[r]] / rows; dlogits (may be null, may be
  // logits) = (softmax - onehot) * grad_scale (* *device_scale when not null); kIgnoreLabel
  // rows add 0 and get 0 gradients. A label outside [0, cols) other than kIgnoreLabel is raised
  // by the stream.
  void (*softmax_xent)(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                       float grad_scale, const float* device_scale, float* loss, float* dlogits,
                       Stream& stream) = nullptr;
  // softmax_xent with dlogits rounded to bf16 (not null, never logits): each element the
  // f32_to_bf16 of what softmax_xent writes.
  void (*softmax_xent_bf16)(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                            float grad_scale, const float* device_scale, float* loss,
                            uint16_t* dlogits, Stream& stream) = nullptr;
  // softmax_xent of bf16 logits (their bits, each widened exactly), dlogits (may be null, may be
  // logits itself) rounded to bf16: the loss of a bf16 step's classifier read once, its gradient
  // written over it.
  void (*softmax_xent_bf16_logits)(const uint16_t* logits, const int32_t* labels, int64_t rows,
                                   int64_t cols, float grad_scale, const float* device_scale,
                                   float* loss, uint16_t* dlogits, Stream& stream) = nullptr;
  // *correct = rows whose argmax (first maximum on ties) is the label; kIgnoreLabel rows are
  // skipped; bad labels as above.
  void (*count_correct)(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                        int32_t* correct, Stream& stream) = nullptr;
  // *count = labels[0..n) that are not kIgnoreLabel.
  void (*count_labels)(const int32_t* labels, int64_t n, int32_t* count, Stream& stream) = nullptr;
};

namespace detail {
inline void check_logits_labels(const char* op, const Tensor& logits, const Tensor& labels,
                                const Stream& stream, DType logits_dtype = DType::kF32) {
  op_check::tensor(op, "logits", logits, logits_dtype, stream);
  op_check::tensor(op, "labels", labels, DType::kI32, stream);
  LS_CHECK(logits.ndim() == 2 && logits.dim(0) > 0 && logits.dim(1) > 0, op, ": logits is ",
           logits.describe(), "; expected a non-empty 2-D [rows, classes] tensor");
  LS_CHECK(labels.ndim() == 1 && labels.dim(0) == logits.dim(0), op, ": labels is ",
           labels.describe(), "; expected [", logits.dim(0), "], one class index per row of ",
           "logits (", logits.describe(), ")");
}
}  // namespace detail

// Logits in bf16 (a bf16 step's classifier output) take a bf16 dlogits or none; that dlogits may
// be the logits tensor itself, overwritten with its gradient.
inline void softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                         const Tensor& dlogits, float grad_scale, Stream& stream,
                         const Tensor& device_scale = Tensor()) {
  const bool bf16_logits = logits.defined() && logits.dtype() == DType::kBF16;
  detail::check_logits_labels("softmax_xent", logits, labels, stream,
                              bf16_logits ? DType::kBF16 : DType::kF32);
  op_check::tensor("softmax_xent", "loss", loss, DType::kF32, stream);
  op_check::scalar("softmax_xent", "loss", loss);
  float* dlogits_data = nullptr;
  const bool bf16_grad = dlogits.defined() && dlogits.dtype() == DType::kBF16;
  if (dlogits.defined()) {
    op_check::tensor("softmax_xent", "dlogits", dlogits, bf16_grad ? DType::kBF16 : DType::kF32,
                     stream);
    LS_CHECK(dlogits.shape() == logits.shape(), "softmax_xent: dlogits is ", dlogits.describe(),
             "; expected the shape of logits (", logits.describe(),
             "), or an undefined Tensor for no gradient");
    LS_CHECK(!bf16_logits || bf16_grad, "softmax_xent: bf16 logits (", logits.describe(),
             ") take a bf16 dlogits (it may be the logits tensor itself); dlogits is ",
             dlogits.describe());
    const bool in_place = dlogits.data() == logits.data();
    LS_CHECK(!bf16_grad || in_place == bf16_logits || !op_check::overlaps(dlogits, logits),
             "softmax_xent: bf16 dlogits (", dlogits.describe(), ") overlaps the logits (",
             logits.describe(), "); give it its own tensor, or the bf16 logits tensor itself");
    if (!bf16_grad) dlogits_data = dlogits.f32();
  }
  const float* device_scale_data = nullptr;
  if (device_scale.defined()) {
    op_check::tensor("softmax_xent", "device_scale", device_scale, DType::kF32, stream);
    op_check::scalar("softmax_xent", "device_scale", device_scale);
    device_scale_data = device_scale.f32();
  }
  // A block a row (ops/cuda/softmax_xent.cu): one read for the maximum and the sum, one more
  // (from L2 when the row is still there) for the loss and dlogits; then one block adds the row
  // losses.
  const auto launches = [&] {
    return OpLaunches{
        ledger::moves("softmax_xent_kernel", {&logits, &logits, &labels, &dlogits}),
        ledger::moves("softmax_xent_loss_kernel", {&labels})};
  };
  if (bf16_logits) {
    op_entry(&SoftmaxXentOps::softmax_xent_bf16_logits, "softmax_xent", stream, launches)(
        logits.bf16(), labels.i32(), logits.dim(0), logits.dim(1), grad_scale, device_scale_data,
        loss.f32(), dlogits.defined() ? dlogits.bf16() : nullptr, stream);
    return;
  }
  if (bf16_grad) {
    op_entry(&SoftmaxXentOps::softmax_xent_bf16, "softmax_xent", stream, launches)(
        logits.f32(), labels.i32(), logits.dim(0), logits.dim(1), grad_scale, device_scale_data,
        loss.f32(), dlogits.bf16(), stream);
    return;
  }
  op_entry(&SoftmaxXentOps::softmax_xent, "softmax_xent", stream, launches)(
      logits.f32(), labels.i32(), logits.dim(0), logits.dim(1), grad_scale, device_scale_data,
      loss.f32(), dlogits_data, stream);
}

inline void count_correct(const Tensor& logits, const Tensor& labels, const Tensor& correct,
                          Stream& stream) {
  detail::check_logits_labels("count_correct", logits, labels, stream);
  op_check::tensor("count_correct", "correct", correct, DType::kI32, stream);
  op_check::scalar("count_correct", "correct", correct);
  op_entry(&SoftmaxXentOps::count_correct, "count_correct", stream, [&] {
    return OpLaunches{ledger::moves("count_correct_kernel", {&logits, &labels})};
  })(logits.f32(), labels.i32(), logits.dim(0), logits.dim(1), correct.i32(), stream);
}

// count (i32 [1]) = the labels (any shape) that are not kIgnoreLabel, counted on the device: the
// number of rows a mean over the non-ignored rows divides by.
inline void count_labels(const Tensor& labels, const Tensor& count, Stream& stream) {
  op_check::tensor("count_labels", "labels", labels, DType::kI32, stream);
  op_check::tensor("count_labels", "count", count, DType::kI32, stream);
  op_check::scalar("count_labels", "count", count);
  LS_CHECK(!op_check::overlaps(labels, count),
           "count_labels: count overlaps labels; pass a "
           "separate tensor");
  op_entry(&SoftmaxXentOps::count_labels, "count_labels", stream, [&] {
    return OpLaunches{ledger::moves("count_labels_kernel", {&labels})};
  })(labels.i32(), labels.numel(), count.i32(), stream);
}

}  // namespace ls
