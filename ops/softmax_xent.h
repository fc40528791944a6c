// Softmax cross-entropy over the rows of f32 logits [rows, cols] with i32 class labels [rows].
//
// softmax_xent: loss (f32 [1]) = mean over rows of -log softmax(logits[r])[labels[r]]; when
// dlogits (f32 [rows, cols]) is defined, dlogits = (softmax(logits) - onehot(labels)) * grad_scale
// (grad_scale = 1/rows gives the gradient of the mean). dlogits may be logits itself (in place).
// count_correct: correct (i32 [1]) = rows whose first maximum is at the label.
// Shapes are checked at the call; labels are read on the device, so a label outside [0, cols) is
// an error raised by the stream (at its next synchronize()/check()). Asynchronous in stream order.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace ls {

void softmax_xent(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                  const Tensor& dlogits, float grad_scale, Stream& stream);
void count_correct(const Tensor& logits, const Tensor& labels, const Tensor& correct,
                   Stream& stream);

}  // namespace ls
