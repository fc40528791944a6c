// attention_softmax against a double-precision masked softmax (causal, key padding, both, rows
// with every key masked, in place); attention_softmax_backward against central differences of
// the masked softmax; split_heads / merge_heads against index arithmetic and each other; the
// whole attention (split_heads, Q K^T by matmul_batched, attention_softmax, P V, merge_heads)
// against a plain reference; argument errors.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

// probs of the masked, scaled softmax in double; key_valid may be empty (no padding).
std::vector<double> reference_softmax(const std::vector<float>& scores,
                                      const std::vector<int32_t>& key_valid, int64_t bh,
                                      int64_t heads, int64_t t, bool causal, double scale) {
  std::vector<double> out(scores.size(), 0.0);
  for (int64_t r = 0; r < bh * t; ++r) {
    const int64_t i = r % t, b = r / t / heads;
    auto kept = [&](int64_t j) {
      return !(causal && j > i) && (key_valid.empty() || key_valid[b * t + j] != 0);
    };
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < t; ++j) {
      if (kept(j)) max = std::max(max, scale * scores[r * t + j]);
    }
    if (std::isinf(max)) continue;  // every key masked: zeros
    double sum = 0.0;
    for (int64_t j = 0; j < t; ++j) {
      if (kept(j)) sum += std::exp(scale * scores[r * t + j] - max);
    }
    for (int64_t j = 0; j < t; ++j) {
      if (kept(j)) out[r * t + j] = std::exp(scale * scores[r * t + j] - max) / sum;
    }
  }
  return out;
}

// Batch 0 fully real, batch 1 left- and right-padded (so causal rows 0..1 have no key), batch 2
// all padding.
std::vector<int32_t> padding_mask(int64_t t) {
  std::vector<int32_t> valid(static_cast<size_t>(3 * t), 1);
  valid[t + 0] = valid[t + 1] = 0;
  valid[2 * t - 1] = 0;
  for (int64_t j = 0; j < t; ++j) valid[2 * t + j] = 0;
  return valid;
}

class AttentionTest : public OpTestBase {};

TEST_F(AttentionTest, SoftmaxMatchesReference) {
  const int64_t batch = 3, heads = 2, t = 7, bh = batch * heads;
  const float scale = 0.5f;
  auto x = random_vector(static_cast<size_t>(bh * t * t), 1, -6, 6);
  x[3] += 1000.0f;  // exp would overflow without the max shift
  for (bool causal : {false, true}) {
    for (bool padded : {false, true}) {
      SCOPED_TRACE(testing::Message() << "causal=" << causal << " padded=" << padded);
      const std::vector<int32_t> valid = padded ? padding_mask(t) : std::vector<int32_t>{};
      const Tensor key_valid = padded ? upload_i32(valid, {batch, t}) : Tensor();
      Tensor scores = upload(x, {bh, t, t});
      Tensor probs = Tensor::empty({bh, t, t}, DType::kF32, dev_);
      attention_softmax(scores, key_valid, heads, causal, scale, probs, *stream_);
      const auto want = reference_softmax(x, valid, bh, heads, t, causal, scale);
      const auto got = download(probs);
      EXPECT_TRUE(all_close(got, want, 1e-5, 1e-7));
      // In place gives the same bits.
      attention_softmax(scores, key_valid, heads, causal, scale, scores, *stream_);
      EXPECT_TRUE(bitwise_equal(download(scores), got));
    }
  }
}

// d/dscores of sum(w * probs) against the backward given dprobs = w.
TEST_F(AttentionTest, BackwardMatchesFiniteDifferences) {
  const int64_t batch = 3, heads = 1, t = 5, bh = batch * heads;
  const float scale = 0.7f;
  const auto x = random_vector(static_cast<size_t>(bh * t * t), 2, -2, 2);
  const auto w = random_vector(x.size(), 3);
  for (bool causal : {false, true}) {
    for (bool padded : {false, true}) {
      SCOPED_TRACE(testing::Message() << "causal=" << causal << " padded=" << padded);
      const Tensor key_valid = padded ? upload_i32(padding_mask(t), {batch, t}) : Tensor();
      Tensor probs = Tensor::empty({bh, t, t}, DType::kF32, dev_);
      Tensor probs_fd = Tensor::empty({bh, t, t}, DType::kF32, dev_);  // leaves probs alone
      auto loss_of = [&](const std::vector<float>& xv) {
        attention_softmax(upload(xv, {bh, t, t}), key_valid, heads, causal, scale, probs_fd,
                          *stream_);
        return dot(download(probs_fd), w);
      };
      attention_softmax(upload(x, {bh, t, t}), key_valid, heads, causal, scale, probs, *stream_);
      Tensor dprobs = upload(w, {bh, t, t});
      Tensor dscores = Tensor::empty({bh, t, t}, DType::kF32, dev_);
      attention_softmax_backward(probs, dprobs, scale, dscores, *stream_);
      const auto got = download(dscores);
      EXPECT_TRUE(all_close(got, fd_gradient(loss_of, x, 1e-2f), 1e-2, 1e-3));
      attention_softmax_backward(probs, dprobs, scale, dprobs, *stream_);  // over dprobs
      EXPECT_TRUE(bitwise_equal(download(dprobs), got));
    }
  }
}

TEST_F(AttentionTest, SplitAndMergeHeadsMoveEveryElement) {
  const std::array<int64_t, 5> dims = {2, 5, 3, 4, 6};  // B, T, G, H, D
  const auto [nb, nt, ng, nh, nd] = dims;
  const int64_t n = nb * nt * ng * nh * nd;
  const auto xv = random_vector(static_cast<size_t>(n), 4);
  Tensor x = upload(xv, {nb, nt, ng * nh * nd});
  Tensor y = Tensor::empty({ng, nb * nh, nt, nd}, DType::kF32, dev_);
  split_heads(x, y, dims, false, *stream_);
  const auto yv = download(y);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t g = 0; g < ng; ++g)
        for (int64_t h = 0; h < nh; ++h)
          for (int64_t d = 0; d < nd; ++d) {
            const int64_t from = (((b * nt + t) * ng + g) * nh + h) * nd + d;
            const int64_t to = (((g * nb + b) * nh + h) * nt + t) * nd + d;
            ASSERT_EQ(yv[to], xv[from]) << "b=" << b << " t=" << t << " g=" << g << " h=" << h;
          }
  Tensor back = upload(std::vector<float>(n, std::nanf("")), {n});
  merge_heads(y, back, dims, false, *stream_);
  EXPECT_TRUE(bitwise_equal(download(back), xv));
  // accumulate: x + merge(split(x)) = 2 x, and y + split(x) = 2 y.
  merge_heads(y, back, dims, true, *stream_);
  split_heads(x, y, dims, true, *stream_);
  std::vector<double> twice_x(xv.size()), twice_y(yv.size());
  for (size_t i = 0; i < xv.size(); ++i) twice_x[i] = 2.0 * xv[i];
  for (size_t i = 0; i < yv.size(); ++i) twice_y[i] = 2.0 * yv[i];
  EXPECT_TRUE(all_close(download(back), twice_x, 0, 0));
  EXPECT_TRUE(all_close(download(y), twice_y, 0, 0));
}

// split_heads_bf16 is cast_to_bf16(split_heads(x)) bit for bit, special values (subnormals,
// infinities, NaN: the vector rounding's hard cases) included.
TEST_F(AttentionTest, SplitHeadsBf16IsTheCastOfSplitHeads) {
  for (const std::array<int64_t, 5> dims :
       {std::array<int64_t, 5>{2, 5, 3, 4, 6}, std::array<int64_t, 5>{2, 9, 1, 2, 64}}) {
    const int64_t n = dims[0] * dims[1] * dims[2] * dims[3] * dims[4];
    auto xv = random_vector(static_cast<size_t>(n), 5, -3, 3);
    xv[1] = 1e-40f;  // subnormal
    xv[2] = std::numeric_limits<float>::infinity();
    xv[3] = std::nanf("");
    xv[static_cast<size_t>(n / 2)] = -2e-39f;
    const Tensor x = upload(xv, {n});
    const Tensor f32 = Tensor::empty({n}, DType::kF32, dev_);
    split_heads(x, f32, dims, false, *stream_);
    const Tensor want = cast_to_bf16(f32, *stream_);
    const Tensor got = Tensor::empty({n}, DType::kBF16, dev_);
    split_heads_bf16(x, got, dims, *stream_);
    // bf16 -> f32 is exact, so equal widened values are equal bf16 bits.
    const auto widened = [&](const Tensor& bf16) {
      const Tensor out = Tensor::empty({n}, DType::kF32, dev_);
      cast(bf16, out, *stream_);
      return download(out);
    };
    EXPECT_TRUE(bitwise_equal(widened(got), widened(want)));
  }
  const std::string msg = error_of([&] {
    split_heads_bf16(upload(std::vector<float>(6), {6}), Tensor::empty({6}, DType::kF32, dev_),
                     {1, 1, 1, 1, 6}, *stream_);
  });
  EXPECT_TRUE(contains(msg, "split_heads_bf16: y is f32[6] on host:0")) << msg;
}

// out = merge(softmax(scale Q K^T + mask) V) from a fused qkv [B, T, 3, H, D], as a transformer
// layer computes it, against plain loops over the token-major qkv.
TEST_F(AttentionTest, AttentionThroughBatchedGemmsMatchesPlainReference) {
  const int64_t nb = 2, nh = 2, nt = 5, nd = 3, bh = nb * nh;
  const float scale = 1.0f / std::sqrt(static_cast<float>(nd));
  const auto qkv = random_vector(static_cast<size_t>(nb * nt * 3 * nh * nd), 5, -2, 2);
  const std::vector<int32_t> valid = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};  // batch 1: 3 real tokens
  auto at = [&](int64_t b, int64_t t, int64_t g, int64_t h, int64_t d) {
    return static_cast<double>(
        qkv[static_cast<size_t>((((b * nt + t) * 3 + g) * nh + h) * nd + d)]);
  };
  for (bool causal : {false, true}) {
    for (bool padded : {false, true}) {
      SCOPED_TRACE(testing::Message() << "causal=" << causal << " padded=" << padded);
      Tensor heads = Tensor::empty({3, bh, nt, nd}, DType::kF32, dev_);
      split_heads(upload(qkv, {nb * nt, 3 * nh * nd}), heads, {nb, nt, 3, nh, nd}, false, *stream_);
      const int64_t block = bh * nt * nd;
      Tensor q = heads.view(0, {bh, nt, nd}), k = heads.view(block, {bh, nt, nd});
      Tensor v = heads.view(2 * block, {bh, nt, nd});
      Tensor scores = Tensor::empty({bh, nt, nt}, DType::kF32, dev_);
      matmul_batched(q, false, k, true, scores, bh, 1.0f, 0.0f, *stream_);
      attention_softmax(scores, padded ? upload_i32(valid, {nb, nt}) : Tensor(), nh, causal, scale,
                        scores, *stream_);
      Tensor context = Tensor::empty({bh, nt, nd}, DType::kF32, dev_);
      matmul_batched(scores, false, v, false, context, bh, 1.0f, 0.0f, *stream_);
      Tensor out = Tensor::empty({nb, nt, nh * nd}, DType::kF32, dev_);
      merge_heads(context, out, {nb, nt, 1, nh, nd}, false, *stream_);

      std::vector<double> want(static_cast<size_t>(nb * nt * nh * nd), 0.0);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t h = 0; h < nh; ++h)
          for (int64_t i = 0; i < nt; ++i) {
            std::vector<double> p(nt, 0.0);
            double max = -1e300, sum = 0.0;
            auto kept = [&](int64_t j) {
              return !(causal && j > i) && (!padded || valid[b * nt + j] != 0);
            };
            for (int64_t j = 0; j < nt; ++j) {
              if (!kept(j)) continue;
              for (int64_t d = 0; d < nd; ++d) p[j] += at(b, i, 0, h, d) * at(b, j, 1, h, d);
              p[j] *= scale;
              max = std::max(max, p[j]);
            }
            for (int64_t j = 0; j < nt; ++j) sum += kept(j) ? std::exp(p[j] - max) : 0.0;
            for (int64_t d = 0; d < nd; ++d) {
              double o = 0.0;
              for (int64_t j = 0; j < nt; ++j) {
                if (kept(j)) o += std::exp(p[j] - max) / sum * at(b, j, 2, h, d);
              }
              want[static_cast<size_t>(((b * nt + i) * nh + h) * nd + d)] = o;
            }
          }
      EXPECT_TRUE(all_close(download(out), want, 1e-5, 1e-6));
    }
  }
}

TEST_F(AttentionTest, ArgumentErrors) {
  Tensor scores = Tensor::empty({4, 3, 3}, DType::kF32, dev_);
  Tensor probs = Tensor::empty({4, 3, 3}, DType::kF32, dev_);
  Tensor valid = upload_i32({1, 1, 1, 1, 0, 0}, {2, 3});
  std::string msg = error_of([&] {
    attention_softmax(Tensor::empty({4, 3, 2}, DType::kF32, dev_), valid, 2, false, 1, probs,
                      *stream_);
  });
  EXPECT_TRUE(contains(msg, "attention_softmax: scores is f32[4, 3, 2]"));
  EXPECT_TRUE(contains(msg, "[batch * heads, T, T]"));
  msg = error_of([&] { attention_softmax(scores, valid, 3, false, 1, probs, *stream_); });
  EXPECT_TRUE(contains(msg, "heads = 3 does not divide the 4"));
  msg = error_of([&] {
    attention_softmax(scores, upload_i32({1, 1, 1}, {1, 3}), 2, false, 1, probs, *stream_);
  });
  EXPECT_TRUE(contains(msg, "key_valid is i32[1, 3] on host:0; expected [2, 3]"));
  msg = error_of([&] {
    attention_softmax(scores, upload({1, 1, 1, 1, 1, 1}, {2, 3}), 2, false, 1, probs, *stream_);
  });
  EXPECT_TRUE(contains(msg, "key_valid is f32[2, 3]"));
  Tensor big = Tensor::empty({40}, DType::kF32, dev_);
  msg = error_of([&] {
    attention_softmax(big.view(0, {4, 3, 3}), valid, 2, false, 1, big.view(1, {4, 3, 3}), *stream_);
  });
  EXPECT_TRUE(contains(msg, "probs (f32[4, 3, 3] on host:0) partly overlaps scores"));
  msg = error_of([&] {
    attention_softmax_backward(probs, Tensor::empty({4, 9}, DType::kF32, dev_), 1, probs, *stream_);
  });
  EXPECT_TRUE(contains(msg, "attention_softmax_backward: dprobs is f32[4, 9]"));
  msg = error_of([&] {
    split_heads(scores, Tensor::empty({35}, DType::kF32, dev_), {2, 3, 1, 2, 3}, false, *stream_);
  });
  EXPECT_TRUE(contains(msg, "split_heads: y is f32[35] on host:0; expected 36 elements"));
  msg = error_of([&] { merge_heads(scores, scores, {2, 3, 1, 2, 3}, false, *stream_); });
  EXPECT_TRUE(contains(msg, "merge_heads: x (f32[4, 3, 3] on host:0) and y"));
  msg = error_of([&] { split_heads(scores, probs, {-2, 3, 1, -2, 3}, false, *stream_); });
  EXPECT_TRUE(contains(msg, "negative size"));
}

}  // namespace
}  // namespace ls::test
