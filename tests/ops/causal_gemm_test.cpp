// causal_scores and causal_apply (ops/causal_gemm.h) on the host: what they compute on and below
// the block diagonal equals the full product there (double reference), for blocks that divide T
// and blocks that do not; causal_scores leaves every element above the block diagonal as it was;
// causal_apply never reads there (NaN there changes nothing); on bf16 operands they equal the
// f32 operands at precision kBF16 bit for bit; the causal softmax backward ignores dprobs above
// the diagonal. Bad arguments are clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/core/runtime.h"
#include "ops/attention.h"
#include "ops/causal_gemm.h"
#include "ops/elementwise.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class CausalGemmTest : public ::testing::Test {
 protected:
  Tensor upload(const std::vector<float>& v, const Shape& shape) {
    return Tensor::from_host(v, shape, host0(), *stream_);
  }
  std::vector<float> download(const Tensor& t) { return t.to_host_f32(*stream_); }

  std::unique_ptr<Stream> stream_ = device_runtime(host0()).create_stream();
};

// Whether element (i, j) of a [T, T] matrix is on or below the block diagonal.
bool in_blocks(int64_t i, int64_t j, int64_t block) { return j / block <= i / block; }

// A lower-triangular [bh, t, t] matrix: random on and below the diagonal, 0 above it within
// the diagonal blocks and `above` (NaN: must not be read) above the block diagonal.
std::vector<float> lower_triangular(int64_t bh, int64_t t, int64_t block, float above) {
  std::vector<float> l = random_vector(static_cast<size_t>(bh * t * t), 3);
  for (int64_t r = 0; r < bh * t; ++r) {
    const int64_t i = r % t;
    for (int64_t j = i + 1; j < t; ++j) {
      l[static_cast<size_t>(r * t + j)] = in_blocks(i, j, block) ? 0.0f : above;
    }
  }
  return l;
}

TEST_F(CausalGemmTest, ScoresMatchTheFullProductOnTheBlocksAndLeaveTheRest) {
  const int64_t bh = 3, d = 5;
  for (const auto& [t, block] : {std::pair<int64_t, int64_t>{70, 32}, {64, 16}, {9, 32}}) {
    SCOPED_TRACE(testing::Message() << "t=" << t << " block=" << block);
    const std::vector<float> x = random_vector(static_cast<size_t>(bh * t * d), 1);
    const std::vector<float> y = random_vector(static_cast<size_t>(bh * t * d), 2);
    const Tensor s = upload(std::vector<float>(static_cast<size_t>(bh * t * t), kNaN), {bh, t, t});
    causal_scores(upload(x, {bh, t, d}), upload(y, {bh, t, d}), s, block, *stream_);
    const std::vector<float> got = download(s);
    int64_t written = 0;
    for (int64_t b = 0; b < bh; ++b) {
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t j = 0; j < t; ++j) {
          const float v = got[static_cast<size_t>((b * t + i) * t + j)];
          if (!in_blocks(i, j, block)) {
            ASSERT_TRUE(std::isnan(v)) << "written above the block diagonal at " << i << "," << j;
            continue;
          }
          double want = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            want += static_cast<double>(x[static_cast<size_t>((b * t + i) * d + e)]) *
                    y[static_cast<size_t>((b * t + j) * d + e)];
          }
          ASSERT_NEAR(v, want, 1e-5) << b << "," << i << "," << j;
          ++written;
        }
      }
    }
    EXPECT_GT(written, 0);
  }
}

TEST_F(CausalGemmTest, ApplyMatchesTheFullProductWithoutReadingAboveTheBlocks) {
  const int64_t bh = 2, d = 6;
  for (const auto& [t, block] : {std::pair<int64_t, int64_t>{70, 32}, {64, 16}, {9, 32}}) {
    for (const bool transposed : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "t=" << t << " block=" << block << " transposed=" << transposed);
      const std::vector<float> l = lower_triangular(bh, t, block, kNaN);
      const std::vector<float> y = random_vector(static_cast<size_t>(bh * t * d), 4);
      const Tensor c = Tensor::empty({bh, t, d}, DType::kF32, host0());
      causal_apply(upload(l, {bh, t, t}), transposed, upload(y, {bh, t, d}), c, block, *stream_);
      const std::vector<float> got = download(c);
      for (int64_t b = 0; b < bh; ++b) {
        for (int64_t i = 0; i < t; ++i) {
          for (int64_t e = 0; e < d; ++e) {
            double want = 0.0;
            for (int64_t j = 0; j < t; ++j) {
              const int64_t row = transposed ? j : i, col = transposed ? i : j;
              if (col > row) continue;  // zero or NaN (not to be read) above the diagonal
              want += static_cast<double>(l[static_cast<size_t>((b * t + row) * t + col)]) *
                      y[static_cast<size_t>((b * t + j) * d + e)];
            }
            ASSERT_NEAR(got[static_cast<size_t>((b * t + i) * d + e)], want, 1e-5)
                << b << "," << i << "," << e;
          }
        }
      }
    }
  }
}

TEST_F(CausalGemmTest, Bf16OperandsEqualF32OperandsRoundedBitForBit) {
  const int64_t bh = 2, t = 70, d = 8, block = 32;
  const Tensor x = upload(random_vector(static_cast<size_t>(bh * t * d), 1), {bh, t, d});
  const Tensor y = upload(random_vector(static_cast<size_t>(bh * t * d), 2), {bh, t, d});
  const Tensor l = upload(lower_triangular(bh, t, block, 0.0f), {bh, t, t});
  const auto scores = [&](const Tensor& a, const Tensor& b, Precision p) {
    const Tensor s = upload(std::vector<float>(static_cast<size_t>(bh * t * t)), {bh, t, t});
    causal_scores(a, b, s, block, *stream_, p);
    return download(s);
  };
  const auto apply = [&](const Tensor& a, bool transposed, const Tensor& b, Precision p) {
    const Tensor c = Tensor::empty({bh, t, d}, DType::kF32, host0());
    causal_apply(a, transposed, b, c, block, *stream_, p);
    return download(c);
  };
  const Tensor x16 = cast_to_bf16(x, *stream_), y16 = cast_to_bf16(y, *stream_);
  const Tensor l16 = cast_to_bf16(l, *stream_);
  EXPECT_TRUE(bitwise_equal(scores(x16, y16, Precision::kF32), scores(x, y, Precision::kBF16)));
  for (const bool transposed : {false, true}) {
    EXPECT_TRUE(bitwise_equal(apply(l16, transposed, y16, Precision::kF32),
                              apply(l, transposed, y, Precision::kBF16)))
        << "transposed=" << transposed;
  }
}

TEST_F(CausalGemmTest, CausalSoftmaxBackwardIgnoresDprobsAboveTheDiagonal) {
  const int64_t bh = 2, t = 40;
  const Tensor scores =
      upload(random_vector(static_cast<size_t>(bh * t * t), 5, -4, 4), {bh, t, t});
  const Tensor probs = Tensor::empty({bh, t, t}, DType::kF32, host0());
  attention_softmax(scores, Tensor(), 1, true, 0.5f, probs, *stream_);
  std::vector<float> dp = random_vector(static_cast<size_t>(bh * t * t), 6);
  const Tensor full = Tensor::empty({bh, t, t}, DType::kF32, host0());
  attention_softmax_backward(probs, upload(dp, {bh, t, t}), 0.5f, full, *stream_);
  for (int64_t r = 0; r < bh * t; ++r) {
    for (int64_t j = r % t + 1; j < t; ++j) dp[static_cast<size_t>(r * t + j)] = kNaN;
  }
  const Tensor causal = Tensor::empty({bh, t, t}, DType::kF32, host0());
  attention_softmax_backward(probs, upload(dp, {bh, t, t}), 0.5f, causal, *stream_, true);
  // Above the diagonal p is 0, so the full backward's terms there are exact zeros (-0 where
  // dprobs - dot < 0; the causal one writes +0: equal values).
  const std::vector<float> got = download(causal), want = download(full);
  int64_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] == want[i] ? 0 : 1;
  EXPECT_EQ(differ, 0);
}

TEST_F(CausalGemmTest, BadArgumentsSayWhatIsWrong) {
  const Tensor x = upload(std::vector<float>(2 * 8 * 4), {2, 8, 4});
  const Tensor s = upload(std::vector<float>(2 * 8 * 8), {2, 8, 8});
  EXPECT_NE(error_of([&] { causal_scores(x, x, s, 0, *stream_); }).find("block = 0"),
            std::string::npos);
  const Tensor x16 = cast_to_bf16(x, *stream_);
  EXPECT_NE(error_of([&] { causal_scores(x, x16, s, 4, *stream_); }).find("both f32 or both bf16"),
            std::string::npos);
  EXPECT_NE(error_of([&] { causal_apply(s, false, x, s, 4, *stream_); }).find("causal_apply: c is"),
            std::string::npos);
}

}  // namespace
}  // namespace ls::test
