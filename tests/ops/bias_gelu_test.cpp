// bias_gelu and bias_gelu_backward (ops/activation.h) on the host: bit for bit the unfused ops
// they replace (bias_add then gelu / gelu_erf; gelu_backward on x + bias then bias_grad), in both
// forms, at shapes whose rows split over threads and whose columns span several sum blocks, in
// place and with dbias accumulated. nn::bias_gelu: the values and gradients of gelu(linear with
// bias), and its input's gradient accumulated when the input feeds another op too. Bad arguments
// are clear errors.
#include <gtest/gtest.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>

#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/elementwise.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class BiasGeluTest : public OpTestBase {
 protected:
  // gelu (tanh or erf form) of x in place.
  void unfused_gelu(const Tensor& x, bool erf) {
    if (erf) {
      gelu_erf(x, x, *stream_);
    } else {
      gelu(x, x, *stream_);
    }
  }
};

struct Shape2 {
  int64_t rows, cols;
};
// Small; cols not a multiple of 16; several 256-column sum blocks and a row split over threads.
constexpr Shape2 kShapes[] = {{1, 1}, {3, 37}, {70, 600}, {300, 1024}};

TEST_F(BiasGeluTest, ForwardIsBiasAddThenGeluBitForBit) {
  for (const Shape2 s : kShapes) {
    for (const bool erf : {false, true}) {
      SCOPED_TRACE(testing::Message() << s.rows << "x" << s.cols << " erf=" << erf);
      const auto x = random_vector(static_cast<size_t>(s.rows * s.cols), 1, -5, 5);
      const Tensor bias = upload(random_vector(static_cast<size_t>(s.cols), 2), {s.cols});
      const Tensor want = upload(x, {s.rows, s.cols});
      bias_add(want, bias, *stream_);
      unfused_gelu(want, erf);
      const Tensor tx = upload(x, {s.rows, s.cols});
      const Tensor got = Tensor::empty({s.rows, s.cols}, DType::kF32, dev_);
      bias_gelu(tx, bias, got, erf, *stream_);
      EXPECT_TRUE(bitwise_equal(download(got), download(want)));
      bias_gelu(tx, bias, tx, erf, *stream_);  // in place
      EXPECT_TRUE(bitwise_equal(download(tx), download(want)));
    }
  }
}

TEST_F(BiasGeluTest, BackwardIsGeluBackwardThenBiasGradBitForBit) {
  for (const Shape2 s : kShapes) {
    for (const bool erf : {false, true}) {
      for (const bool accumulate : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << s.rows << "x" << s.cols << " erf=" << erf << " accumulate=" << accumulate);
        const size_t n = static_cast<size_t>(s.rows * s.cols);
        const Tensor x = upload(random_vector(n, 3, -5, 5), {s.rows, s.cols});
        const Tensor dy = upload(random_vector(n, 4), {s.rows, s.cols});
        const auto bias_values = random_vector(static_cast<size_t>(s.cols), 5);
        const auto dbias0 = random_vector(static_cast<size_t>(s.cols), 6);
        const Tensor bias = upload(bias_values, {s.cols});
        // Unfused: u = x + bias, dx = dy gelu'(u), dbias (+)= column sums of dx.
        const Tensor u = upload(download(x), {s.rows, s.cols});
        bias_add(u, bias, *stream_);
        const Tensor want_dx = Tensor::empty({s.rows, s.cols}, DType::kF32, dev_);
        if (erf) {
          gelu_erf_backward(u, dy, want_dx, false, *stream_);
        } else {
          gelu_backward(u, dy, want_dx, false, *stream_);
        }
        const Tensor want_dbias = upload(dbias0, {s.cols});
        bias_grad(want_dx, want_dbias, accumulate, *stream_);

        const Tensor dx = Tensor::empty({s.rows, s.cols}, DType::kF32, dev_);
        const Tensor dbias = upload(dbias0, {s.cols});
        bias_gelu_backward(x, bias, dy, dx, dbias, erf, accumulate, *stream_);
        EXPECT_TRUE(bitwise_equal(download(dx), download(want_dx)));
        EXPECT_TRUE(bitwise_equal(download(dbias), download(want_dbias)));
        // Over dy (in place).
        const Tensor dy_copy = upload(download(dy), {s.rows, s.cols});
        const Tensor dbias2 = upload(dbias0, {s.cols});
        bias_gelu_backward(x, bias, dy_copy, dy_copy, dbias2, erf, accumulate, *stream_);
        EXPECT_TRUE(bitwise_equal(download(dy_copy), download(want_dx)));
        EXPECT_TRUE(bitwise_equal(download(dbias2), download(want_dbias)));
      }
    }
  }
}

TEST_F(BiasGeluTest, BadArgumentsSayWhatIsWrong) {
  const Tensor x = upload(std::vector<float>(12), {3, 4});
  const Tensor bias = upload(std::vector<float>(4), {4});
  const Tensor wrong = upload(std::vector<float>(3), {3});
  EXPECT_NE(error_of([&] {
              bias_gelu(x, wrong, x, false, *stream_);
            }).find("bias_gelu: bias is f32[3] on host:0; expected [4]"),
            std::string::npos);
  const Tensor flat = upload(std::vector<float>(12), {12});
  EXPECT_NE(error_of([&] { bias_gelu(flat, bias, flat, false, *stream_); }).find("bias_gelu: x"),
            std::string::npos);
  const Tensor dx = upload(std::vector<float>(12), {3, 4});
  EXPECT_NE(error_of([&] {
              bias_gelu_backward(x, bias, x, dx, dx.view(0, {4}), false, false, *stream_);
            }).find("dbias (f32[4] on host:0) overlaps"),
            std::string::npos);
}

// nn::bias_gelu(linear(x, W, no bias), b) against nn::gelu(linear(x, W, b)): the same bits for the
// output and for the gradients of x, W and b, in both forms.
TEST_F(BiasGeluTest, NnBiasGeluIsGeluOfALinearWithBias) {
  const int64_t rows = 9, in = 7, out = 300;
  const Tensor x = upload(random_vector(rows * in, 7), {rows, in});
  const Tensor dy = upload(random_vector(rows * out, 8), {rows, out});
  for (const bool erf : {false, true}) {
    SCOPED_TRACE(testing::Message() << "erf=" << erf);
    std::vector<std::vector<float>> results[2];
    for (const bool fused : {false, true}) {
      Tape tape(*stream_);
      Var vx = tape.differentiable_input(upload(download(x), {rows, in}));
      Var w = tape.differentiable_input(upload(random_vector(out * in, 9), {out, in}));
      Var b = tape.differentiable_input(upload(random_vector(out, 10), {out}));
      Var y = fused ? nn::bias_gelu(tape, nn::linear(tape, vx, w, nullptr), b, erf)
                    : (erf ? nn::gelu_erf(tape, nn::linear(tape, vx, w, &b))
                           : nn::gelu(tape, nn::linear(tape, vx, w, &b)));
      tape.backward(y, dy);
      results[fused] = {download(y->value), download(vx->grad), download(w->grad),
                        download(b->grad)};
    }
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_TRUE(bitwise_equal(results[1][i], results[0][i])) << "result " << i;
    }
  }
}

// h feeds bias_gelu and a residual add: its gradient is dy + dy gelu'(h + b), the two summed.
TEST_F(BiasGeluTest, NnBiasGeluAccumulatesIntoAnInputUsedTwice) {
  const int64_t rows = 5, cols = 40;
  const Tensor h = upload(random_vector(rows * cols, 11, -3, 3), {rows, cols});
  const Tensor bias = upload(random_vector(cols, 12), {cols});
  const Tensor dy = upload(random_vector(rows * cols, 13), {rows, cols});
  Tape tape(*stream_);
  Var vh = tape.differentiable_input(h);
  Var vb = tape.differentiable_input(bias);
  Var y = nn::add(tape, nn::bias_gelu(tape, vh, vb), vh);
  tape.backward(y, dy);

  const Tensor u = upload(download(h), {rows, cols});
  bias_add(u, bias, *stream_);
  const Tensor want = Tensor::empty({rows, cols}, DType::kF32, dev_);
  gelu_backward(u, dy, want, false, *stream_);
  axpy(1.0f, dy, want, *stream_);
  EXPECT_TRUE(bitwise_equal(download(vh->grad), download(want)));
  const Tensor want_db = Tensor::empty({cols}, DType::kF32, dev_);
  gelu_backward(u, dy, u, false, *stream_);
  bias_grad(u, want_db, false, *stream_);
  EXPECT_TRUE(bitwise_equal(download(vb->grad), download(want_db)));
}

}  // namespace
}  // namespace ls::test
