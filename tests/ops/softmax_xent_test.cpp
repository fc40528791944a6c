// softmax_xent and count_correct against a double-precision reference (including logits far
// from 0, which overflow exp without the max shift); in-place gradients; dlogits against central
// differences of the loss; out-of-range labels surfacing at synchronize(); first-max ties;
// results bitwise independent of chunking; kIgnoreLabel rows (no loss, zero gradient, skipped by
// count_correct, not counted by count_labels); argument errors.
#include "ops/softmax_xent.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "ops/elementwise.h"
#include "ops/host/host_ops.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

struct XentRef {
  double loss = 0.0;
  std::vector<double> dlogits;
};

XentRef reference_xent(const std::vector<float>& x, const std::vector<int32_t>& labels,
                       int64_t rows, int64_t cols, double grad_scale) {
  XentRef ref;
  ref.dlogits.resize(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] == kIgnoreLabel) continue;  // loss 0, gradient row 0
    const float* row = x.data() + r * cols;
    double max = row[0];
    for (int64_t c = 1; c < cols; ++c) max = std::max(max, static_cast<double>(row[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
    ref.loss += std::log(sum) + max - row[labels[r]];
    for (int64_t c = 0; c < cols; ++c) {
      const double p = std::exp(row[c] - max) / sum;
      ref.dlogits[r * cols + c] = (p - (c == labels[r] ? 1.0 : 0.0)) * grad_scale;
    }
  }
  ref.loss /= static_cast<double>(rows);
  return ref;
}

class SoftmaxXentTest : public OpTestBase {};

TEST_F(SoftmaxXentTest, MatchesReference) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1},   {1, 5},    {3, 7},
                                                           {17, 33}, {128, 10}, {64, 1000}};
  for (auto [rows, cols] : shapes) {
    auto x = random_vector(rows * cols, 1, -5, 5);
    // Rows shifted far from 0: exp would overflow without subtracting the row max.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) x[r * cols + c] += 1000.0f * static_cast<float>(r % 3);
    }
    const auto labels = random_labels(rows, static_cast<int32_t>(cols), 2);
    const float grad_scale = 1.0f / static_cast<float>(rows);
    const XentRef ref = reference_xent(x, labels, rows, cols, grad_scale);

    Tensor logits = upload(x, {rows, cols});
    Tensor tl = upload_i32(labels, {rows});
    Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
    Tensor dlogits = Tensor::empty({rows, cols}, DType::kF32, dev_);
    softmax_xent(logits, tl, loss, dlogits, grad_scale, *stream_);
    EXPECT_TRUE(all_close(download(loss), {ref.loss}, 1e-4, 1e-6)) << rows << "x" << cols;
    EXPECT_TRUE(all_close(download(dlogits), ref.dlogits, 1e-4, 1e-6 * grad_scale))
        << rows << "x" << cols;

    Tensor loss_only = Tensor::empty({1}, DType::kF32, dev_);
    softmax_xent(logits, tl, loss_only, Tensor(), grad_scale, *stream_);
    EXPECT_TRUE(bitwise_equal(download(loss_only), download(loss))) << rows << "x" << cols;
  }
}

TEST_F(SoftmaxXentTest, InPlaceGradientMatches) {
  const int64_t rows = 9, cols = 13;
  const auto x = random_vector(rows * cols, 3, -4, 4);
  const auto labels = random_labels(rows, cols, 4);
  Tensor tl = upload_i32(labels, {rows});
  Tensor loss_a = Tensor::empty({1}, DType::kF32, dev_);
  Tensor loss_b = Tensor::empty({1}, DType::kF32, dev_);
  Tensor dlogits = Tensor::empty({rows, cols}, DType::kF32, dev_);
  softmax_xent(upload(x, {rows, cols}), tl, loss_a, dlogits, 0.5f, *stream_);
  Tensor inplace = upload(x, {rows, cols});
  softmax_xent(inplace, tl, loss_b, inplace, 0.5f, *stream_);
  EXPECT_TRUE(bitwise_equal(download(inplace), download(dlogits)));
  EXPECT_TRUE(bitwise_equal(download(loss_b), download(loss_a)));
}

// bf16 dlogits are the f32 ones rounded, bit for bit, with the same loss; ignored rows get 0, and
// a device scale applies as in f32. A bf16 gradient of another shape is refused.
TEST_F(SoftmaxXentTest, Bf16GradientIsTheF32GradientRounded) {
  const int64_t rows = 11, cols = 300;
  const auto x = random_vector(rows * cols, 7, -6, 6);
  auto labels = random_labels(rows, cols, 8);
  labels[3] = kIgnoreLabel;
  const Tensor logits = upload(x, {rows, cols}), tl = upload_i32(labels, {rows});
  const Tensor scale = upload({0.25f}, {1});
  for (const Tensor* device_scale : {static_cast<const Tensor*>(nullptr), &scale}) {
    const Tensor ds = device_scale != nullptr ? *device_scale : Tensor();
    Tensor loss32 = Tensor::empty({1}, DType::kF32, dev_);
    Tensor loss16 = Tensor::empty({1}, DType::kF32, dev_);
    Tensor d32 = Tensor::empty({rows, cols}, DType::kF32, dev_);
    Tensor d16 = Tensor::empty({rows, cols}, DType::kBF16, dev_);
    softmax_xent(logits, tl, loss32, d32, 1.0f / rows, *stream_, ds);
    softmax_xent(logits, tl, loss16, d16, 1.0f / rows, *stream_, ds);
    const Tensor rounded = cast_to_bf16(d32, *stream_);
    Tensor widened = Tensor::empty({rows, cols}, DType::kF32, dev_);
    Tensor expected = Tensor::empty({rows, cols}, DType::kF32, dev_);
    cast(d16, widened, *stream_);
    cast(rounded, expected, *stream_);
    EXPECT_TRUE(bitwise_equal(download(widened), download(expected)));
    EXPECT_TRUE(bitwise_equal(download(loss16), download(loss32)));
  }
  Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
  EXPECT_THROW(softmax_xent(logits, tl, loss, Tensor::empty({rows, cols - 1}, DType::kBF16, dev_),
                            1.0f, *stream_),
               Error);
}

// With grad_scale = 1/rows, dlogits is the gradient of the (mean) loss.
TEST_F(SoftmaxXentTest, GradientMatchesFiniteDifferences) {
  const int64_t rows = 4, cols = 6;
  const auto x = random_vector(rows * cols, 5, -2, 2);
  Tensor tl = upload_i32(random_labels(rows, cols, 6), {rows});
  Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
  auto loss_of = [&](const std::vector<float>& xv) {
    softmax_xent(upload(xv, {rows, cols}), tl, loss, Tensor(), 1.0f, *stream_);
    return static_cast<double>(download(loss)[0]);
  };
  Tensor dlogits = Tensor::empty({rows, cols}, DType::kF32, dev_);
  softmax_xent(upload(x, {rows, cols}), tl, loss, dlogits, 1.0f / rows, *stream_);
  EXPECT_TRUE(all_close(download(dlogits), fd_gradient(loss_of, x, 1e-2f), 1e-2, 1e-3));
}

TEST_F(SoftmaxXentTest, LabelOutOfRangeFailsAtSynchronize) {
  Tensor logits = upload(random_vector(15, 7), {3, 5});
  Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
  // The call itself succeeds: labels are read by the kernel, on the stream.
  softmax_xent(logits, upload_i32({0, 5, 1}, {3}), loss, Tensor(), 1.0f, *stream_);
  const std::string msg = error_of([&] { stream_->synchronize(); });
  EXPECT_TRUE(contains(msg, "label 5 in row 1"));
  EXPECT_TRUE(contains(msg, "[0, 5)"));

  softmax_xent(logits, upload_i32({2, 2, -1}, {3}), loss, Tensor(), 1.0f, *stream_);
  EXPECT_THROW(stream_->synchronize(), Error);

  // The error was reported once; the stream works again.
  softmax_xent(logits, upload_i32({0, 4, 1}, {3}), loss, Tensor(), 1.0f, *stream_);
  EXPECT_TRUE(std::isfinite(download(loss)[0]));
}

TEST_F(SoftmaxXentTest, CountCorrectUsesFirstMaximum) {
  // clang-format off
  Tensor logits = upload({1, 3, 3,    // label 1: first max -> correct
                          1, 3, 3,    // label 2: second max -> wrong
                          2, 2, 2,    // label 0: correct
                          2, 2, 2,    // label 1: wrong
                          0, -1, 5,   // label 2: correct
                          5, -1, 0},  // label 2: wrong
                         {6, 3});
  // clang-format on
  Tensor correct = Tensor::empty({1}, DType::kI32, dev_);
  count_correct(logits, upload_i32({1, 2, 0, 1, 2, 2}, {6}), correct, *stream_);
  EXPECT_EQ(correct.to_host_i32(*stream_)[0], 3);

  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {17, 3}, {300, 10}}) {
    const auto x = random_vector(rows * cols, 8);
    const auto labels = random_labels(rows, cols, 9);
    int32_t want = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x.data() + r * cols;
      want += std::max_element(row, row + cols) - row == labels[r] ? 1 : 0;
    }
    count_correct(upload(x, {rows, cols}), upload_i32(labels, {rows}), correct, *stream_);
    EXPECT_EQ(correct.to_host_i32(*stream_)[0], want) << rows << "x" << cols;
  }
}

// Rows are split across chunks (kHostGrain / cols rows each). One call over all rows must equal
// one call per row bitwise: the same dlogits, and the loss as the row losses summed in order.
TEST_F(SoftmaxXentTest, ResultsDoNotDependOnChunking) {
  const int64_t cols = 10, grain = kHostGrain / cols;
  for (int64_t rows : {grain - 1, grain, grain + 1, 2 * grain + 24}) {
    const auto x = random_vector(rows * cols, 10, -3, 3);
    Tensor logits = upload(x, {rows, cols});
    Tensor labels = upload_i32(random_labels(rows, cols, 11), {rows});
    const float scale = 1.0f / static_cast<float>(rows);
    Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
    Tensor whole = Tensor::empty({rows, cols}, DType::kF32, dev_);
    softmax_xent(logits, labels, loss, whole, scale, *stream_);

    Tensor row_loss = Tensor::empty({rows}, DType::kF32, dev_);
    Tensor by_row = Tensor::empty({rows, cols}, DType::kF32, dev_);
    for (int64_t r = 0; r < rows; ++r) {
      softmax_xent(logits.view(r * cols, {1, cols}), labels.view(r, {1}), row_loss.view(r, {1}),
                   by_row.view(r * cols, {1, cols}), scale, *stream_);
    }
    EXPECT_TRUE(bitwise_equal(download(by_row), download(whole))) << "rows=" << rows;
    double total = 0.0;
    for (float l : download(row_loss)) total += l;
    EXPECT_TRUE(bitwise_equal(download(loss), {static_cast<float>(total / rows)}))
        << "rows=" << rows;
  }
}

// Rows labelled kIgnoreLabel: no loss (the sum is still divided by all rows), a zero gradient
// row (also in place), skipped by count_correct, not counted by count_labels; other negative
// labels are still errors.
TEST_F(SoftmaxXentTest, IgnoredLabelsAddNothing) {
  const int64_t rows = 7, cols = 5;
  const auto x = random_vector(rows * cols, 12, -3, 3);
  std::vector<int32_t> labels = random_labels(rows, cols, 13);
  labels[1] = labels[4] = labels[6] = kIgnoreLabel;
  const float grad_scale = 1.0f / rows;
  const XentRef ref = reference_xent(x, labels, rows, cols, grad_scale);
  Tensor tl = upload_i32(labels, {rows});
  Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
  Tensor dlogits = upload(std::vector<float>(rows * cols, std::nanf("")), {rows, cols});
  softmax_xent(upload(x, {rows, cols}), tl, loss, dlogits, grad_scale, *stream_);
  EXPECT_TRUE(all_close(download(loss), {ref.loss}, 1e-5, 1e-7));
  const auto grad = download(dlogits);
  EXPECT_TRUE(all_close(grad, ref.dlogits, 1e-4, 1e-7));
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(grad[4 * cols + c], 0.0f);
  Tensor inplace = upload(x, {rows, cols});
  softmax_xent(inplace, tl, loss, inplace, grad_scale, *stream_);
  EXPECT_TRUE(bitwise_equal(download(inplace), grad));

  // dlogits is the gradient of the loss with the ignored rows left out.
  auto loss_of = [&](const std::vector<float>& xv) {
    softmax_xent(upload(xv, {rows, cols}), tl, loss, Tensor(), 1.0f, *stream_);
    return static_cast<double>(download(loss)[0]);
  };
  EXPECT_TRUE(all_close(grad, fd_gradient(loss_of, x, 1e-2f), 1e-2, 1e-3));

  // Every row ignored: loss 0.
  const std::vector<int32_t> none(rows, kIgnoreLabel);
  softmax_xent(upload(x, {rows, cols}), upload_i32(none, {rows}), loss, Tensor(), 1, *stream_);
  EXPECT_EQ(download(loss)[0], 0.0f);

  Tensor correct = Tensor::empty({1}, DType::kI32, dev_);
  std::vector<int32_t> argmax(rows);
  for (int64_t r = 0; r < rows; ++r) {
    argmax[r] =
        static_cast<int32_t>(std::max_element(x.begin() + r * cols, x.begin() + (r + 1) * cols) -
                             (x.begin() + r * cols));
  }
  argmax[2] = kIgnoreLabel;
  count_correct(upload(x, {rows, cols}), upload_i32(argmax, {rows}), correct, *stream_);
  EXPECT_EQ(correct.to_host_i32(*stream_)[0], rows - 1);
  Tensor count = Tensor::empty({1}, DType::kI32, dev_);
  count_labels(tl, count, *stream_);
  EXPECT_EQ(count.to_host_i32(*stream_)[0], rows - 3);
  count_labels(upload_i32(none, {1, rows}), count, *stream_);
  EXPECT_EQ(count.to_host_i32(*stream_)[0], 0);

  labels[0] = -5;
  softmax_xent(upload(x, {rows, cols}), upload_i32(labels, {rows}), loss, Tensor(), 1, *stream_);
  const std::string msg = error_of([&] { stream_->synchronize(); });
  EXPECT_TRUE(contains(msg, "label -5 in row 0"));
  EXPECT_TRUE(contains(msg, "-100 (kIgnoreLabel)"));
  count_correct(upload(x, {rows, cols}), upload_i32(labels, {rows}), correct, *stream_);
  EXPECT_THROW(stream_->synchronize(), Error);
}

TEST_F(SoftmaxXentTest, ArgumentErrors) {
  Tensor logits = Tensor::empty({4, 3}, DType::kF32, dev_);
  Tensor labels = upload_i32({0, 1, 2, 0}, {4});
  Tensor loss = Tensor::empty({1}, DType::kF32, dev_);
  std::string msg = error_of([&] {
    softmax_xent(logits, upload({0, 1, 2, 0}, {4}), loss, Tensor(), 1.0f, *stream_);
  });
  EXPECT_TRUE(contains(msg, "softmax_xent: labels is f32[4]"));
  EXPECT_TRUE(contains(msg, "expected dtype i32"));
  msg = error_of([&] {
    softmax_xent(logits, upload_i32({0, 1}, {2}), loss, Tensor(), 1, *stream_);
  });
  EXPECT_TRUE(contains(msg, "labels is i32[2]"));
  EXPECT_TRUE(contains(msg, "expected [4]"));
  msg = error_of([&] {
    softmax_xent(logits, labels, Tensor::empty({2}, DType::kF32, dev_), Tensor(), 1, *stream_);
  });
  EXPECT_TRUE(contains(msg, "softmax_xent: loss is f32[2]"));
  msg = error_of([&] {
    softmax_xent(logits, labels, loss, Tensor::empty({3, 4}, DType::kF32, dev_), 1, *stream_);
  });
  EXPECT_TRUE(contains(msg, "dlogits is f32[3, 4]"));
  msg = error_of([&] { softmax_xent(logits.reshape({12}), labels, loss, Tensor(), 1, *stream_); });
  EXPECT_TRUE(contains(msg, "2-D [rows, classes]"));
  msg = error_of([&] { count_correct(logits, labels, loss, *stream_); });
  EXPECT_TRUE(contains(msg, "count_correct: correct is f32[1]"));
  msg = error_of([&] { count_labels(labels, loss, *stream_); });
  EXPECT_TRUE(contains(msg, "count_labels: count is f32[1]"));
  msg = error_of([&] { count_labels(logits, labels.view(0, {1}), *stream_); });
  EXPECT_TRUE(contains(msg, "count_labels: labels is f32[4, 3]"));
}

}  // namespace
}  // namespace ls::test
