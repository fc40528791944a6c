// The CUDA kernels of the transformer layer ops (embedding, layernorm, dropout, gelu_erf,
// bias_gelu) against the host kernels on the same inputs: the embedding lookup and gradient and
// dropout bitwise (same summation order, same integer hash), layernorm, gelu_erf and bias_gelu
// (both forms, its backward's bias sums too) within rounding;
// repeated CUDA runs bitwise equal; a bad id the same error on both backends. Every test skips
// without a GPU (the style of tests/ops/cuda_ops_test.cpp).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/activation.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layernorm.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class CudaLayerOpsTest : public CudaVsHostTest {};

TEST_F(CudaLayerOpsTest, EmbeddingAndItsGradientMatchHostBitwise) {
  for (auto [vocab, dim, n] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {2, 33, 300}, {11, 7, 100}, {50, 300, 1000}, {1000, 64, 5000}}) {
    SCOPED_TRACE(testing::Message() << vocab << "x" << dim << " n=" << n);
    Pair table = upload(random_vector(vocab * dim, 1), {vocab, dim});
    Pair ids = upload_i32(random_labels(n, static_cast<int32_t>(vocab), 2), {n});
    Pair out = empty({n, dim});
    Pair dy = upload(random_vector(n * dim, 3, -10, 10), {n, dim});
    run_both([&](Stream& s, auto side) {
      embedding(side(table), side(ids), side(out), s);
      embedding_backward(side(dy), side(ids), side(table), s);
    });
    expect_bitwise(out);
    expect_bitwise(table);
  }
}

// GPT-2's 50,257-token vocabulary: a table that size, ids over all of it with many repeats
// (one id in four from a handful of common tokens). Bitwise the host's, and the same again.
TEST_F(CudaLayerOpsTest, EmbeddingGradientAtTheGpt2VocabularyMatchesHostBitwise) {
  const int64_t vocab = 50257, dim = 16, n = 3000;  // three sort tiles: merges
  std::vector<int32_t> id_values = random_labels(n, static_cast<int32_t>(vocab), 4);
  for (int64_t i = 0; i < n; i += 4) id_values[i] = static_cast<int32_t>((i * 7) % 5) * 10000;
  id_values[1] = static_cast<int32_t>(vocab - 1);
  Pair ids = upload_i32(id_values, {n});
  Pair dy = upload(random_vector(n * dim, 3, -10, 10), {n, dim});
  Pair table = upload(random_vector(vocab * dim, 1), {vocab, dim});
  run_both([&](Stream& s, auto side) { embedding_backward(side(dy), side(ids), side(table), s); });
  expect_bitwise(table);
  Tensor again = Tensor::from_host(random_vector(vocab * dim, 1), {vocab, dim}, kCuda0, *cuda_);
  embedding_backward(dy.cuda, ids.cuda, again, *cuda_);
  EXPECT_TRUE(bitwise_equal(again.to_host_f32(*cuda_), cuda_values(table)));
}

TEST_F(CudaLayerOpsTest, InvalidIdIsTheSameErrorOnBothBackends) {
  Pair table = upload(random_vector(4 * 3, 1), {4, 3});
  Pair bad = upload_i32({0, 9, 2}, {3}), good = upload_i32({0, 3, 2}, {3});
  Pair out = empty({3, 3}), dy = upload(random_vector(9, 2), {3, 3});
  std::vector<std::string> messages;
  run_both([&](Stream& stream, auto side) {
    embedding(side(table), side(bad), side(out), stream);
    messages.push_back(error_of([&] { stream.synchronize(); }));
    embedding_backward(side(dy), side(bad), side(table), stream);
    messages.push_back(error_of([&] { stream.synchronize(); }));
    embedding(side(table), side(good), side(out), stream);
    messages.push_back(error_of([&] { stream.synchronize(); }));
  });
  ASSERT_EQ(messages.size(), 6u);
  EXPECT_TRUE(contains(messages[0], "embedding: id 9 in row 1 is outside [0, 4)"));
  EXPECT_TRUE(contains(messages[1], "embedding_backward: id 9 in row 1 is outside [0, 4)"));
  EXPECT_EQ(messages[2], "<no error>");
  const auto text = [](const std::string& m) {
    return m.substr(0, std::min(m.find(" ["), m.find(" (")));
  };
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(text(messages[i]), text(messages[i + 3]));
}

// The residual add inside LayerNorm: on each backend bit for bit add then layernorm (f32 y and
// the bf16 copy, the sum, the statistics), and CUDA within layernorm's tolerance of the host. Rows
// of 768 take the float4 path, rows of 33 the scalar one.
TEST_F(CudaLayerOpsTest, AddLayerNormIsAddThenLayerNormOnEachBackend) {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{64, 768}, {300, 33}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    Pair a = upload(random_vector(rows * cols, 1, -3, 3), {rows, cols});
    Pair b = upload(random_vector(rows * cols, 2, -3, 3), {rows, cols});
    Pair gamma = upload(random_vector(cols, 3), {cols}),
         beta = upload(random_vector(cols, 4), {cols});
    Pair fused_sum = empty({rows, cols}), fused_y = empty({rows, cols});
    Pair fused_mean = empty({rows}), fused_rstd = empty({rows});
    Pair fused_y16 = empty({rows, cols}, DType::kBF16);
    Pair sum = empty({rows, cols}), y = empty({rows, cols}), mean = empty({rows}),
         rstd = empty({rows}), y16 = empty({rows, cols}, DType::kBF16);
    run_both([&](Stream& s, auto side) {
      add_layernorm(side(a), side(b), side(fused_sum), side(gamma), side(beta), 1e-5f,
                    side(fused_y), side(fused_mean), side(fused_rstd), s, side(fused_y16));
      add(side(a), side(b), side(sum), s);
      layernorm(side(sum), side(gamma), side(beta), 1e-5f, side(y), side(mean), side(rstd), s,
                side(y16));
    });
    for (const auto& [fused, separate] : std::vector<std::pair<Pair*, Pair*>>{
             {&fused_sum, &sum}, {&fused_y, &y}, {&fused_mean, &mean}, {&fused_rstd, &rstd}}) {
      EXPECT_TRUE(bitwise_equal(host_values(*fused), host_values(*separate)));
      EXPECT_TRUE(bitwise_equal(cuda_values(*fused), cuda_values(*separate)));
    }
    for (Pair* bits : {&fused_y16, &y16}) {  // widened exactly: equal bits, equal floats
      Pair wide = empty({rows, cols});
      run_both([&](Stream& s, auto side) { cast(side(*bits), side(wide), s); });
      *bits = wide;
    }
    EXPECT_TRUE(bitwise_equal(host_values(fused_y16), host_values(y16)));
    EXPECT_TRUE(bitwise_equal(cuda_values(fused_y16), cuda_values(y16)));
    expect_close(fused_y, 1e-4, 1e-5);
    expect_close(fused_sum, 0, 0);
  }
}

TEST_F(CudaLayerOpsTest, LayerNormMatchesHostAndRepeats) {
  for (auto [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 7}, {129, 65}, {64, 768}, {7, 3000}, {1, 5000}, {300, 33}}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(testing::Message() << rows << "x" << cols << " accumulate=" << accumulate);
      Pair x = upload(random_vector(rows * cols, 1, -3, 3), {rows, cols});
      Pair gamma = upload(random_vector(cols, 2), {cols}),
           beta = upload(random_vector(cols, 3), {cols});
      Pair y = empty({rows, cols}), mean = empty({rows}), rstd = empty({rows});
      Pair dy = upload(random_vector(rows * cols, 4), {rows, cols});
      Pair dx = upload(random_vector(rows * cols, 5), {rows, cols});
      Pair dgamma = upload(random_vector(cols, 6), {cols}),
           dbeta = upload(random_vector(cols, 7), {cols});
      run_both([&](Stream& s, auto side) {
        layernorm(side(x), side(gamma), side(beta), 1e-5f, side(y), side(mean), side(rstd), s);
        layernorm_backward(side(x), side(gamma), side(mean), side(rstd), side(dy), side(dx),
                           accumulate, side(dgamma), side(dbeta), s);
      });
      expect_close(y, 1e-4, 1e-5);
      expect_close(mean, 1e-5, 1e-6);
      expect_close(rstd, 1e-4, 0);
      expect_close(dx, 1e-3, 1e-4);
      expect_close(dgamma, 1e-4, 1e-4);
      expect_close(dbeta, 1e-4, 1e-4);
      // The CUDA kernels again: bitwise the same.
      const auto first_dx = cuda_values(dx);
      layernorm_backward(x.cuda, gamma.cuda, mean.cuda, rstd.cuda, dy.cuda, dx.cuda, false,
                         dgamma.cuda, dbeta.cuda, *cuda_);
      Tensor dx2 = Tensor::empty({rows, cols}, DType::kF32, kCuda0);
      layernorm_backward(x.cuda, gamma.cuda, mean.cuda, rstd.cuda, dy.cuda, dx2, false, dgamma.cuda,
                         dbeta.cuda, *cuda_);
      EXPECT_TRUE(bitwise_equal(cuda_values(dx), dx2.to_host_f32(*cuda_)));
      if (!accumulate) {
        EXPECT_TRUE(bitwise_equal(cuda_values(dx), first_dx));
      }
      // dgamma and dbeta (tiled column sums: 2 row tiles at 300 rows) repeat bitwise too.
      std::vector<float> param_grads[2];
      for (auto& grads : param_grads) {
        Tensor g = Tensor::from_host(std::vector<float>(cols, 0.0f), {cols}, kCuda0, *cuda_);
        Tensor b = Tensor::from_host(std::vector<float>(cols, 0.0f), {cols}, kCuda0, *cuda_);
        layernorm_backward(x.cuda, gamma.cuda, mean.cuda, rstd.cuda, dy.cuda, dx2, false, g, b,
                           *cuda_);
        grads = g.to_host_f32(*cuda_);
        const auto beta_grads = b.to_host_f32(*cuda_);
        grads.insert(grads.end(), beta_grads.begin(), beta_grads.end());
      }
      EXPECT_TRUE(bitwise_equal(param_grads[0], param_grads[1]));
    }
  }
}

TEST_F(CudaLayerOpsTest, DropoutMatchesHostBitwise) {
  for (int64_t n : {1, 7, 1000, 70001}) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " accumulate=" << accumulate);
      Pair x = upload(random_vector(n, 1), {n});
      Pair y = upload(random_vector(n, 2), {n});
      run_both([&](Stream& s, auto side) {
        dropout(side(x), side(y), n % 7 == 0 ? 7 : 1, 12345, 0.37f, dropout_key(9, 3, 1),
                accumulate, s);
      });
      expect_bitwise(y);
    }
  }
}

TEST_F(CudaLayerOpsTest, GeluErfMatchesHost) {
  for (int64_t n : {1, 7, 1000, 70001}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    Pair x = upload(random_vector(n, 1, -6, 6), {n});
    Pair dy = upload(random_vector(n, 2), {n});
    Pair y = empty({n});
    run_both([&](Stream& s, auto side) { gelu_erf(side(x), side(y), s); });
    expect_close(y, 1e-5, 1e-6);
    for (bool accumulate : {false, true}) {
      Pair dx = upload(random_vector(n, 3), {n});
      run_both([&](Stream& s, auto side) {
        gelu_erf_backward(side(x), side(dy), side(dx), accumulate, s);
      });
      expect_close(dx, 1e-5, 1e-6);
    }
  }
}

// The bf16 copies LayerNorm and bias + GELU write beside their outputs (VarNode::value16): bit for
// bit the host's (the same f32 values rounded the same way would need equal f32 values; the
// kernels differ in summation order, so the check is against the CUDA output itself, rounded).
TEST_F(CudaLayerOpsTest, Bf16SideOutputsAreTheOutputRounded) {
  const int64_t rows = 33, cols = 768;
  Pair x = upload(random_vector(rows * cols, 1, -3, 3), {rows, cols});
  Pair gamma = upload(random_vector(cols, 2), {cols}), beta = upload(random_vector(cols, 3), {cols});
  Pair y = empty({rows, cols}), mean = empty({rows}), rstd = empty({rows});
  Pair y16 = empty({rows, cols}, DType::kBF16), g = empty({rows, cols});
  Pair g16 = empty({rows, cols}, DType::kBF16);
  Pair widened = empty({rows, cols}), rounded = empty({rows, cols}, DType::kBF16);
  Pair expected = empty({rows, cols}), gw = empty({rows, cols}), ge = empty({rows, cols});
  Pair gr = empty({rows, cols}, DType::kBF16);
  run_both([&](Stream& s, auto side) {
    layernorm(side(x), side(gamma), side(beta), 1e-5f, side(y), side(mean), side(rstd), s,
              side(y16));
    cast(side(y16), side(widened), s);
    cast(side(y), side(rounded), s);
    cast(side(rounded), side(expected), s);
    bias_gelu(side(x), side(beta), side(g), false, s, side(g16));
    cast(side(g16), side(gw), s);
    cast(side(g), side(gr), s);
    cast(side(gr), side(ge), s);
  });
  EXPECT_TRUE(bitwise_equal(cuda_values(widened), cuda_values(expected)));
  EXPECT_TRUE(bitwise_equal(cuda_values(gw), cuda_values(ge)));
  expect_close(y, 1e-4, 1e-5);
}

TEST_F(CudaLayerOpsTest, BiasGeluMatchesHost) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {9, 37}, {70, 600}}) {
    for (const bool erf : {false, true}) {
      for (const bool accumulate : {false, true}) {
        SCOPED_TRACE(testing::Message()
                     << rows << "x" << cols << " erf=" << erf << " accumulate=" << accumulate);
        Pair x = upload(random_vector(rows * cols, 1, -6, 6), {rows, cols});
        Pair bias = upload(random_vector(cols, 2), {cols});
        Pair dy = upload(random_vector(rows * cols, 3), {rows, cols});
        Pair y = empty({rows, cols}), dx = empty({rows, cols});
        Pair dbias = upload(random_vector(cols, 4), {cols});
        run_both([&](Stream& s, auto side) {
          bias_gelu(side(x), side(bias), side(y), erf, s);
          bias_gelu_backward(side(x), side(bias), side(dy), side(dx), side(dbias), erf, accumulate,
                             s);
        });
        expect_close(y, 1e-5, 1e-6);
        expect_close(dx, 1e-5, 1e-6);
        expect_close(dbias, 1e-4, 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace ls::test
