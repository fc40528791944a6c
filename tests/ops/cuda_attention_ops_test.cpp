// The CUDA kernels of the transformer ops against the host kernels, in the style of
// tests/ops/cuda_ops_test.cpp: matmul_batched (every transpose pair), attention_softmax (causal,
// padding, in place) and its backward, split_heads / merge_heads, pool / pool_backward in every
// mode, token_mask, softmax_xent / count_correct with kIgnoreLabel rows and count_labels; the
// softmax bitwise repeatable. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/attention.h"
#include "ops/causal_gemm.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/pooling.h"
#include "ops/softmax_xent.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class CudaAttentionOpsTest : public CudaVsHostTest {};

TEST_F(CudaAttentionOpsTest, MatmulBatchedMatchesHost) {
  const int64_t batch = 6, m = 17, k = 9, n = 33;
  for (int t = 0; t < 4; ++t) {
    for (float beta : {0.0f, 1.0f}) {
      const bool ta = t & 1, tb = t & 2;
      SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb << " beta=" << beta);
      Pair a =
          upload(random_vector(batch * m * k, 1), ta ? Shape{batch, k, m} : Shape{batch, m, k});
      Pair b =
          upload(random_vector(batch * k * n, 2), tb ? Shape{batch, n, k} : Shape{batch, k, n});
      Pair c = upload(random_vector(batch * m * n, 3), {batch, m, n});
      run_both([&](Stream& s, auto side) {
        matmul_batched(side(a), ta, side(b), tb, side(c), batch, 0.75f, beta, s);
      });
      expect_close(c, 1e-4, 1e-5);
    }
  }
}

TEST_F(CudaAttentionOpsTest, AttentionSoftmaxAndBackwardMatchHost) {
  const int64_t batch = 3, heads = 2;
  for (int64_t t : {1, 5, 64, 300}) {
    const int64_t bh = batch * heads;
    std::vector<int32_t> valid(static_cast<size_t>(batch * t), 1);
    for (int64_t j = t / 2; j < t; ++j) valid[t + j] = 0;  // batch 1 half padding
    for (int64_t j = 0; j < t; ++j) valid[2 * t + j] = 0;  // batch 2 all padding
    Pair key_valid = upload_i32(valid, {batch, t});
    Pair dprobs = upload(random_vector(bh * t * t, 5), {bh, t, t});
    for (bool causal : {false, true}) {
      for (bool padded : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << "t=" << t << " causal=" << causal << " padded=" << padded);
        Pair scores = upload(random_vector(bh * t * t, 4, -8, 8), {bh, t, t});
        Pair probs = empty({bh, t, t}, DType::kF32), dscores = empty({bh, t, t}, DType::kF32);
        run_both([&](Stream& s, auto side) {
          const Tensor kv = padded ? side(key_valid) : Tensor();
          attention_softmax(side(scores), kv, heads, causal, 0.3f, side(probs), s);
          attention_softmax_backward(side(probs), side(dprobs), 0.3f, side(dscores), s, causal);
          attention_softmax(side(scores), kv, heads, causal, 0.3f, side(scores), s);  // in place
        });
        expect_close(probs);
        expect_close(scores);
        expect_close(dscores, 1e-4, 1e-6);
      }
    }
  }
}

// The blocked causal products (3 blocks of 32, 32 and 6 rows): what cuBLAS writes on and below
// the block diagonal matches the host; dprobs-style outputs above it stay as they were.
TEST_F(CudaAttentionOpsTest, CausalProductsMatchHost) {
  const int64_t bh = 3, t = 70, d = 8, block = 32;
  Pair x = upload(random_vector(bh * t * d, 1), {bh, t, d});
  Pair y = upload(random_vector(bh * t * d, 2), {bh, t, d});
  std::vector<float> lower = random_vector(bh * t * t, 3);
  for (int64_t r = 0; r < bh * t; ++r) {
    for (int64_t j = r % t + 1; j < t; ++j) lower[static_cast<size_t>(r * t + j)] = 0.0f;
  }
  Pair l = upload(lower, {bh, t, t});
  Pair s = upload(std::vector<float>(static_cast<size_t>(bh * t * t), 7.0f), {bh, t, t});
  Pair c = empty({bh, t, d}, DType::kF32), ct = empty({bh, t, d}, DType::kF32);
  run_both([&](Stream& on, auto side) {
    causal_scores(side(x), side(y), side(s), block, on);
    causal_apply(side(l), false, side(y), side(c), block, on);
    causal_apply(side(l), true, side(y), side(ct), block, on);
  });
  expect_close(s, 1e-4, 1e-5);
  expect_close(c, 1e-4, 1e-5);
  expect_close(ct, 1e-4, 1e-5);
}

TEST_F(CudaAttentionOpsTest, AttentionSoftmaxIsBitwiseRepeatable) {
  const int64_t bh = 8, t = 257;
  Tensor scores =
      Tensor::from_host(random_vector(bh * t * t, 1, -8, 8), {bh, t, t}, kCuda0, *cuda_);
  Tensor probs = Tensor::empty({bh, t, t}, DType::kF32, kCuda0);
  attention_softmax(scores, Tensor(), 2, true, 0.125f, probs, *cuda_);
  const auto first = probs.to_host_f32(*cuda_);
  attention_softmax(scores, Tensor(), 2, true, 0.125f, probs, *cuda_);
  EXPECT_TRUE(bitwise_equal(probs.to_host_f32(*cuda_), first));
}

TEST_F(CudaAttentionOpsTest, SplitAndMergeHeadsMatchHost) {
  const std::array<int64_t, 5> dims = {3, 7, 3, 4, 5};
  const int64_t n = 3 * 7 * 3 * 4 * 5;
  for (bool accumulate : {false, true}) {
    Pair x = upload(random_vector(n, 1), {n});
    Pair y = upload(random_vector(n, 2), {n});
    Pair back = upload(random_vector(n, 3), {n});
    run_both([&](Stream& s, auto side) {
      split_heads(side(x), side(y), dims, accumulate, s);
      merge_heads(side(y), side(back), dims, accumulate, s);
    });
    expect_close(y, 0, 0);
    expect_close(back, 0, 0);
  }
}

TEST_F(CudaAttentionOpsTest, SplitHeadsBf16MatchesHostBitForBit) {
  const std::array<int64_t, 5> dims = {3, 7, 3, 4, 5};
  const int64_t n = 3 * 7 * 3 * 4 * 5;
  std::vector<float> values = random_vector(n, 1);
  values[0] = 1e-40f;  // subnormal
  values[1] = std::nanf("");
  Pair x = upload(values, {n});
  Pair y = empty({n}, DType::kBF16), widened = empty({n});
  run_both([&](Stream& s, auto side) {
    split_heads_bf16(side(x), side(y), dims, s);
    cast(side(y), side(widened), s);  // exact: equal values are equal bf16 bits
  });
  expect_bitwise(widened);
}

TEST_F(CudaAttentionOpsTest, PoolingAndTokenMaskMatchHost) {
  const int64_t batch = 4, t = 9, c = 300;
  Pair tokens = upload_i32({5, 6, 7, 8, 9, 1, 2, 0, 0,  //
                            0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                            0, 0, 3, 4, 5, 6, 7, 8, 9,  //
                            4, 0, 5, 0, 6, 0, 7, 0, 0},
                           {batch, t});
  Pair valid = empty({batch, t}, DType::kI32);
  run_both([&](Stream& s, auto side) { token_mask(side(tokens), 0, side(valid), s); });
  expect_equal_i32(valid);
  Pair x = upload(random_vector(batch * t * c, 1), {batch, t, c});
  Pair dy = upload(random_vector(batch * c, 2), {batch, c});
  for (Pooling mode : {Pooling::kLast, Pooling::kFirst, Pooling::kMean}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(testing::Message() << pooling_name(mode) << " accumulate=" << accumulate);
      Pair y = empty({batch, c}, DType::kF32);
      Pair dx = upload(random_vector(batch * t * c, 3), {batch, t, c});
      run_both([&](Stream& s, auto side) {
        pool(side(x), side(valid), mode, side(y), s);
        pool_backward(side(dy), side(valid), mode, side(dx), accumulate, s);
      });
      expect_close(y, 0, 0);  // the same sums in the same order
      expect_close(dx, 0, 0);
    }
  }
}

TEST_F(CudaAttentionOpsTest, IgnoredLabelsMatchHost) {
  const int64_t rows = 300, cols = 17;
  std::vector<int32_t> labels = random_labels(rows, cols, 2);
  for (int64_t r = 0; r < rows; r += 3) labels[r] = kIgnoreLabel;
  Pair logits = upload(random_vector(rows * cols, 1, -8, 8), {rows, cols});
  Pair tl = upload_i32(labels, {rows});
  Pair loss = empty({1}, DType::kF32), dlogits = empty({rows, cols}, DType::kF32);
  Pair correct = empty({1}, DType::kI32), count = empty({1}, DType::kI32);
  run_both([&](Stream& s, auto side) {
    softmax_xent(side(logits), side(tl), side(loss), side(dlogits), 1.0f / rows, s);
    count_correct(side(logits), side(tl), side(correct), s);
    count_labels(side(tl), side(count), s);
  });
  expect_close(loss);
  expect_close(dlogits);
  expect_equal_i32(correct);
  expect_equal_i32(count);
  EXPECT_EQ(count.cuda.to_host_i32(*cuda_)[0], rows - (rows + 2) / 3);
}

// bf16 dlogits on CUDA: the CUDA f32 gradient rounded, bit for bit, and close to the host's, over
// a row wider than a block of threads (GPT-2's rows are 50,257 wide).
TEST_F(CudaAttentionOpsTest, Bf16GradientIsTheF32GradientRounded) {
  const int64_t rows = 5, cols = 1000;
  std::vector<int32_t> labels = random_labels(rows, cols, 3);
  labels[2] = kIgnoreLabel;
  Pair logits = upload(random_vector(rows * cols, 4, -8, 8), {rows, cols});
  Pair tl = upload_i32(labels, {rows});
  Pair loss32 = empty({1}), loss16 = empty({1}), d32 = empty({rows, cols});
  Pair d16 = empty({rows, cols}, DType::kBF16), widened = empty({rows, cols});
  Pair rounded = empty({rows, cols}, DType::kBF16), expected = empty({rows, cols});
  run_both([&](Stream& s, auto side) {
    softmax_xent(side(logits), side(tl), side(loss32), side(d32), 1.0f / rows, s);
    softmax_xent(side(logits), side(tl), side(loss16), side(d16), 1.0f / rows, s);
    cast(side(d16), side(widened), s);
    cast(side(d32), side(rounded), s);
    cast(side(rounded), side(expected), s);
  });
  EXPECT_TRUE(bitwise_equal(cuda_values(widened), cuda_values(expected)));
  EXPECT_TRUE(bitwise_equal(cuda_values(loss16), cuda_values(loss32)));
  expect_close(loss32);
  expect_close(d32);
  expect_close(widened, 1e-2, 1e-6);
}

}  // namespace
}  // namespace ls::test
