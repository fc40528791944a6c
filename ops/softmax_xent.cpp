// softmax_xent / count_correct: argument checks (logits f32 [rows, cols], labels i32 [rows],
// scalar outputs, one device), then the stream's kernel table. Label values live on the device,
// so they are checked by the kernel, not here.
#include "ops/softmax_xent.h"

#include "engine/core/error.h"
#include "ops/kernels.h"

namespace ls {
namespace {

void expect(const char* op, const char* name, const Tensor& t, DType dtype, const Stream& stream) {
  LS_CHECK(t.defined(), op, ": ", name, " is an undefined Tensor; pass a ", dtype_name(dtype),
           " tensor");
  LS_CHECK(t.dtype() == dtype, op, ": ", name, " is ", t.describe(), "; expected dtype ",
           dtype_name(dtype));
  LS_CHECK(t.device() == stream.device(), op, ": ", name, " is ", t.describe(),
           " but the stream runs on ", stream.device().str(),
           "; all tensors must be on the stream's device");
}

void check_logits_labels(const char* op, const Tensor& logits, const Tensor& labels,
                         const Stream& stream) {
  expect(op, "logits", logits, DType::kF32, stream);
  expect(op, "labels", labels, DType::kI32, stream);
  LS_CHECK(logits.ndim() == 2 && logits.dim(0) > 0 && logits.dim(1) > 0, op, ": logits is ",
           logits.describe(), "; expected a non-empty 2-D [rows, classes] tensor");
  LS_CHECK(labels.ndim() == 1 && labels.dim(0) == logits.dim(0), op, ": labels is ",
           labels.describe(), "; expected [", logits.dim(0), "], one class index per row of ",
           "logits (", logits.describe(), ")");
}

void expect_scalar(const char* op, const char* name, const Tensor& t) {
  LS_CHECK(t.numel() == 1, op, ": ", name, " is ", t.describe(),
           "; expected a single element, e.g. shape [1]");
}

}  // namespace

void softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                  const Tensor& dlogits, float grad_scale, Stream& stream) {
  check_logits_labels("softmax_xent", logits, labels, stream);
  expect("softmax_xent", "loss", loss, DType::kF32, stream);
  expect_scalar("softmax_xent", "loss", loss);
  float* dlogits_data = nullptr;
  if (dlogits.defined()) {
    expect("softmax_xent", "dlogits", dlogits, DType::kF32, stream);
    LS_CHECK(dlogits.shape() == logits.shape(), "softmax_xent: dlogits is ", dlogits.describe(),
             "; expected the shape of logits (", logits.describe(),
             "), or an undefined Tensor for no gradient");
    dlogits_data = dlogits.f32();
  }
  kernels_for(stream.device())
      .softmax_xent(logits.f32(), labels.i32(), logits.dim(0), logits.dim(1), grad_scale,
                    loss.f32(), dlogits_data, stream);
}

void count_correct(const Tensor& logits, const Tensor& labels, const Tensor& correct,
                   Stream& stream) {
  check_logits_labels("count_correct", logits, labels, stream);
  expect("count_correct", "correct", correct, DType::kI32, stream);
  expect_scalar("count_correct", "correct", correct);
  kernels_for(stream.device())
      .count_correct(logits.f32(), labels.i32(), logits.dim(0), logits.dim(1), correct.i32(),
                     stream);
}

}  // namespace ls
