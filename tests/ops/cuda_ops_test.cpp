// The CUDA backend against the host backend: every CUDA kernel on the same random inputs as the
// host kernel (odd sizes, 1, both transposes, accumulate on/off, in place), bitwise-repeatable
// reductions, CUDA Stream/Event semantics (cross-stream ordering, timing, abort), caching
// allocator reuse, and cuda_availability() explaining itself. Every test skips without a GPU,
// except the availability test, whose point is the explanation given when there is none.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/dtype.h>
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/optim.h"
#include "ops/softmax_xent.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

// One backend's kernel table of an op family: the tests call kernels with raw pointers so that
// both backends run exactly the same arguments (leading dimensions included).
template <typename Table>
const Table& ops_of(DeviceKind kind) {
  const Table* table = find_op_table<Table>(kind);
  if (table == nullptr) throw std::runtime_error("no kernel table for this backend");
  return *table;
}
const std::vector<int64_t> kSizes = {1, 7, 1000, 70001};
constexpr double kRtol = 1e-5;

class CudaOpsTest : public CudaVsHostTest {
 protected:
  // Calls op(backend, stream, side) once with the host kernels and once with the CUDA kernels;
  // side(pair) is that backend's tensor of a Pair. (Hides CudaVsHostTest::run_both, whose op
  // gets no backend: the tests here call the kernel tables directly.)
  template <typename Op>
  void run_both(Op op) {
    op(DeviceKind::kHost, *host_, [](const Pair& p) { return p.host; });
    op(DeviceKind::kCuda, *cuda_, [](const Pair& p) { return p.cuda; });
  }

  // On each backend, every element of `copy` (bf16) is exactly f32_to_bf16 of that backend's
  // `values` (f32): the optimizers' bf16 copy of the parameters they updated.
  void expect_bf16_rounding(const Pair& values, const Pair& copy) {
    const size_t n = static_cast<size_t>(values.host.numel());
    const std::vector<float> from[2] = {host_values(values), cuda_values(values)};
    std::vector<uint16_t> bits[2] = {std::vector<uint16_t>(n), std::vector<uint16_t>(n)};
    copy.host.copy_to_host_async(bits[0].data(), n * sizeof(uint16_t), *host_);
    host_->synchronize();
    copy.cuda.copy_to_host_async(bits[1].data(), n * sizeof(uint16_t), *cuda_);
    cuda_->synchronize();
    for (int side = 0; side < 2; ++side) {
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong += bits[side][i] != f32_to_bf16(from[side][i]);
      EXPECT_EQ(wrong, 0u) << (side == 0 ? "host" : "cuda") << ": of " << n;
    }
  }
};

// ---- GEMM ------------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, k, n;
};

TEST_F(CudaOpsTest, GemmMatchesHostForAllTransposesAndLeadingDimensions) {
  const std::vector<GemmCase> shapes = {{1, 1, 1},     {1, 7, 1},      {3, 5, 7}, {17, 33, 9},
                                        {64, 128, 96}, {129, 257, 65}, {5, 0, 3}};
  const float alpha = 0.75f;
  for (const GemmCase& s : shapes) {
    for (int t = 0; t < 4; ++t) {
      for (float beta : {0.0f, 1.0f}) {
        for (int64_t pad : {0, 3}) {
          const bool ta = t & 1, tb = t & 2;
          SCOPED_TRACE(testing::Message() << s.m << "x" << s.k << "x" << s.n << " ta=" << ta
                                          << " tb=" << tb << " beta=" << beta << " pad=" << pad);
          const int64_t a_rows = ta ? s.k : s.m, a_cols = ta ? s.m : s.k;
          const int64_t b_rows = tb ? s.n : s.k, b_cols = tb ? s.k : s.n;
          const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = s.n + pad;
          const auto a = random_vector(static_cast<size_t>(a_rows * lda), 1);
          const auto b = random_vector(static_cast<size_t>(b_rows * ldb), 2);
          auto c = random_vector(static_cast<size_t>(s.m * ldc), 3);
          if (beta == 0.0f) c[0] = std::numeric_limits<float>::quiet_NaN();  // must be overwritten
          Pair pa = upload(a, {a_rows * lda}), pb = upload(b, {b_rows * ldb});
          Pair pc = upload(c, {s.m * ldc});
          run_both([&](DeviceKind kernels, Stream& stream, auto side) {
            ops_of<GemmOps>(kernels).gemm(ta, tb, s.m, s.n, s.k, alpha, side(pa).f32(), lda,
                                          side(pb).f32(), ldb, beta, side(pc).f32(), ldc,
                                          Precision::kF32, stream);
          });
          const auto want = host_values(pc);
          const auto got = cuda_values(pc);
          // Tolerance relative to the magnitudes summed: sum_p |a_ip b_pj| + |beta c_ij|.
          for (int64_t i = 0; i < s.m; ++i) {
            for (int64_t j = 0; j < ldc; ++j) {
              double magnitude = 0.0;
              if (j < s.n) {
                for (int64_t p = 0; p < s.k; ++p) {
                  const float av = ta ? a[p * lda + i] : a[i * lda + p];
                  const float bv = tb ? b[j * ldb + p] : b[p * ldb + j];
                  magnitude += std::abs(static_cast<double>(av) * bv);
                }
                if (beta != 0.0f) magnitude += std::abs(c[i * ldc + j]);
              }
              const size_t ij = static_cast<size_t>(i * ldc + j);
              ASSERT_LE(std::abs(static_cast<double>(got[ij]) - want[ij]), 1e-4 * magnitude + 1e-6)
                  << "C[" << i << "][" << j << "]: cuda " << got[ij] << ", host " << want[ij];
            }
          }
        }
      }
    }
  }
}

// ---- elementwise -----------------------------------------------------------------------------

TEST_F(CudaOpsTest, BiasAddAndBiasGradMatchHost) {
  for (auto [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 7}, {129, 65}, {1000, 3}, {0, 5},
                                                {1, 5000}, {300, 768}, {513, 33}}) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    Pair y = upload(random_vector(rows * cols, 1), {rows, cols});
    Pair bias = upload(random_vector(cols, 2), {cols});
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<BiasOps>(k).bias_add(side(y).f32(), side(bias).f32(), rows, cols, s);
    });
    expect_close(y);
    for (bool accumulate : {false, true}) {
      Pair dbias = upload(random_vector(cols, 3), {cols});
      run_both([&](DeviceKind k, Stream& s, auto side) {
        ops_of<BiasOps>(k).bias_grad(side(y).f32(), side(dbias).f32(), rows, cols, accumulate, s);
      });
      expect_close(dbias, kRtol, 1e-5);  // sums of `rows` terms, in different orders
    }
    // The tiled CUDA sum (several row tiles from 257 rows on) repeats bitwise.
    Tensor first = Tensor::empty({cols}, DType::kF32, kCuda0);
    Tensor second = Tensor::empty({cols}, DType::kF32, kCuda0);
    for (Tensor* out : {&first, &second}) {
      ops_of<BiasOps>(DeviceKind::kCuda)
          .bias_grad(y.cuda.f32(), out->f32(), rows, cols, false, *cuda_);
    }
    EXPECT_TRUE(bitwise_equal(first.to_host_f32(*cuda_), second.to_host_f32(*cuda_)));
  }
}

// tanh (BERT's pooler) and its backward, which takes the forward's output.
TEST_F(CudaOpsTest, TanhAndItsGradientMatchHost) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    Pair x = upload(random_vector(n, 1, -4.0f, 4.0f), {n});
    Pair dy = upload(random_vector(n, 2), {n});
    Pair y = empty({n}, DType::kF32);
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<ActivationOps>(k).tanh(side(x).f32(), side(y).f32(), n, s);
    });
    expect_close(y);
    for (bool accumulate : {false, true}) {
      Pair dx = upload(random_vector(n, 3), {n});
      run_both([&](DeviceKind k, Stream& s, auto side) {
        ops_of<ActivationOps>(k).tanh_backward(side(y).f32(), side(dy).f32(), side(dx).f32(), n,
                                               accumulate, s);
      });
      expect_close(dx);
    }
  }
}

TEST_F(CudaOpsTest, ActivationsAndTheirGradientsMatchHost) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    Pair x = upload(random_vector(n, 1, -4.0f, 4.0f), {n});
    Pair dy = upload(random_vector(n, 2), {n});
    for (bool gelu : {false, true}) {
      Pair y = empty({n}, DType::kF32);
      run_both([&](DeviceKind k, Stream& s, auto side) {
        if (gelu) {
          ops_of<ActivationOps>(k).gelu(side(x).f32(), side(y).f32(), n, s);
        } else {
          ops_of<ActivationOps>(k).relu(side(x).f32(), side(y).f32(), n, s);
        }
      });
      expect_close(y);
      for (bool accumulate : {false, true}) {
        Pair dx = upload(random_vector(n, 3), {n});
        run_both([&](DeviceKind k, Stream& s, auto side) {
          if (gelu) {
            ops_of<ActivationOps>(k).gelu_backward(side(x).f32(), side(dy).f32(), side(dx).f32(), n,
                                                   accumulate, s);
          } else {
            ops_of<ActivationOps>(k).relu_backward(side(x).f32(), side(dy).f32(), side(dx).f32(), n,
                                                   accumulate, s);
          }
        });
        expect_close(dx);
      }
    }
  }
}

TEST_F(CudaOpsTest, FillScaleAxpyAddMatchHost) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    Pair x = upload(random_vector(n, 1), {n});
    Pair y = upload(random_vector(n, 2), {n});
    Pair filled = empty({n}, DType::kF32);
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<ElementwiseOps>(k).fill(side(filled).f32(), n, 2.5f, s);
      ops_of<ElementwiseOps>(k).scale(side(x).f32(), n, -1.5f, s);
      ops_of<ElementwiseOps>(k).axpy(0.25f, side(x).f32(), side(y).f32(), n, s);
    });
    expect_close(filled, 0.0, 0.0);
    expect_close(x);
    expect_close(y);
    Pair out = empty({n}, DType::kF32);
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<ElementwiseOps>(k).add(side(x).f32(), side(y).f32(), side(out).f32(), n, s);
      ops_of<ElementwiseOps>(k).add(side(out).f32(), side(x).f32(), side(out).f32(), n,
                                    s);  // out aliases a
    });
    expect_close(out);
  }
}

TEST_F(CudaOpsTest, CountNonfiniteMatchesHostAsI32AndF32) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    std::vector<float> values = random_vector(n, 4);
    for (int64_t i = 0; i < n; i += 7) values[static_cast<size_t>(i)] = i % 2 ? INFINITY : NAN;
    Pair x = upload(values, {n});
    Pair as_f32 = empty({1}, DType::kF32);
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<ElementwiseOps>(k).count_nonfinite_f32(side(x).f32(), n, side(as_f32).f32(), s);
    });
    expect_close(as_f32, 0.0, 0.0);
  }
}

TEST_F(CudaOpsTest, CastsMatchHostBitwise) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto values = random_vector(n, 1, -1e4f, 1e4f);
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::denorm_min(),
                              1.00390625f /* tie */};
    for (size_t i = 0; i < std::size(specials) && i < values.size(); ++i) values[i] = specials[i];
    Pair x = upload(values, {n});
    Pair half = empty({n}, DType::kBF16);
    Pair back = empty({n}, DType::kF32);
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<ElementwiseOps>(k).cast_f32_to_bf16(side(x).f32(), side(half).bf16(), n, s);
      ops_of<ElementwiseOps>(k).cast_bf16_to_f32(side(half).bf16(), side(back).f32(), n, s);
    });
    std::vector<uint16_t> host_half(n), cuda_half(n);
    half.host.copy_to_host_async(host_half.data(), n * sizeof(uint16_t), *host_);
    host_->synchronize();
    half.cuda.copy_to_host_async(cuda_half.data(), n * sizeof(uint16_t), *cuda_);
    cuda_->synchronize();
    EXPECT_EQ(host_half, cuda_half);
    EXPECT_TRUE(bitwise_equal(host_values(back), cuda_values(back)));
  }
}

TEST_F(CudaOpsTest, FillColumnsMatchesHostAndLeavesTheOtherColumns) {
  // The padded vocabulary's mask (rows of 50,304 with 47 filled), a row wider than a block's
  // threads, and more rows than blocks.
  const std::vector<std::array<int64_t, 3>> cases = {
      {3, 50304, 50257}, {5, 300, 0}, {70001, 9, 8}, {2, 7, 7}};
  for (const auto& [rows, cols, first] : cases) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols << " from " << first);
    const int64_t n = rows * cols;
    std::vector<uint16_t> before(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) before[static_cast<size_t>(i)] = static_cast<uint16_t>(i * 7);
    Pair x = empty({rows, cols}, DType::kBF16);
    x.host.copy_from_host_async(before.data(), n * sizeof(uint16_t), *host_);
    x.cuda.copy_from_host_async(before.data(), n * sizeof(uint16_t), *cuda_);
    const uint16_t minus_inf = f32_to_bf16(-std::numeric_limits<float>::infinity());
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<ElementwiseOps>(k).fill_columns_bf16(side(x).bf16(), rows, cols, first, minus_inf, s);
    });
    std::vector<uint16_t> want = before;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = first; c < cols; ++c) want[static_cast<size_t>(r * cols + c)] = minus_inf;
    }
    for (const auto& [t, stream] : {std::pair{&x.host, host_.get()}, {&x.cuda, cuda_.get()}}) {
      std::vector<uint16_t> got(static_cast<size_t>(n));
      t->copy_to_host_async(got.data(), n * sizeof(uint16_t), *stream);
      stream->synchronize();
      EXPECT_EQ(got, want) << t->device().str();
    }
  }
}

// ---- softmax cross-entropy -------------------------------------------------------------------

const std::vector<std::pair<int64_t, int64_t>> kXentShapes = {
    {1, 1}, {1, 10}, {7, 3}, {128, 10}, {33, 1000}, {300, 17}, {1, 5000}, {257, 33}};

TEST_F(CudaOpsTest, SoftmaxXentMatchesHost) {
  for (auto [rows, cols] : kXentShapes) {
    for (bool with_grad : {true, false}) {
      SCOPED_TRACE(testing::Message() << rows << "x" << cols << " grad=" << with_grad);
      auto x = random_vector(rows * cols, 1, -8.0f, 8.0f);
      for (int64_t i = 0; i < rows * cols; ++i) x[i] += 100.0f * static_cast<float>((i / cols) % 3);
      Pair logits = upload(x, {rows, cols});
      Pair labels = upload_i32(random_labels(rows, static_cast<int32_t>(cols), 2), {rows});
      Pair loss = empty({1}, DType::kF32);
      Pair dlogits = empty({rows, cols}, DType::kF32);
      const float grad_scale = 1.0f / static_cast<float>(rows);
      run_both([&](DeviceKind k, Stream& s, auto side) {
        ops_of<SoftmaxXentOps>(k).softmax_xent(side(logits).f32(), side(labels).i32(), rows, cols,
                                               grad_scale, nullptr, side(loss).f32(),
                                               with_grad ? side(dlogits).f32() : nullptr, s);
      });
      expect_close(loss);
      if (with_grad) expect_close(dlogits, kRtol, 1e-6);
    }
  }
}

TEST_F(CudaOpsTest, SoftmaxXentInPlaceMatchesHost) {
  for (auto [rows, cols] : kXentShapes) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    Pair logits = upload(random_vector(rows * cols, 1, -8.0f, 8.0f), {rows, cols});
    Pair labels = upload_i32(random_labels(rows, static_cast<int32_t>(cols), 2), {rows});
    Pair loss = empty({1}, DType::kF32);
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<SoftmaxXentOps>(k).softmax_xent(side(logits).f32(), side(labels).i32(), rows, cols,
                                             0.5f, nullptr, side(loss).f32(), side(logits).f32(),
                                             s);
    });
    expect_close(loss);
    expect_close(logits, kRtol, 1e-6);
  }
}

TEST_F(CudaOpsTest, SoftmaxXentIsBitwiseRepeatable) {
  const int64_t rows = 4096, cols = 10;
  Tensor logits =
      Tensor::from_host(random_vector(rows * cols, 1, -8.0f, 8.0f), {rows, cols}, kCuda0, *cuda_);
  Tensor labels = Tensor::from_host_i32(random_labels(rows, cols, 2), {rows}, kCuda0, *cuda_);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    Tensor loss = Tensor::empty({1}, DType::kF32, kCuda0);
    Tensor dlogits = Tensor::empty({rows, cols}, DType::kF32, kCuda0);
    ops_of<SoftmaxXentOps>(DeviceKind::kCuda)
        .softmax_xent(logits.f32(), labels.i32(), rows, cols, 1.0f / rows, nullptr, loss.f32(),
                      dlogits.f32(), *cuda_);
    std::vector<float> result = loss.to_host_f32(*cuda_);
    const auto grad = dlogits.to_host_f32(*cuda_);
    result.insert(result.end(), grad.begin(), grad.end());
    if (run == 0) {
      first = result;
    } else {
      EXPECT_TRUE(bitwise_equal(first, result));
    }
  }
}

// GPT-2's vocabulary: 50,257 classes (8 rows here; the model's [16384, 50257] has the same
// per-row work). Matches the host, and the loss and dlogits repeat bitwise.
TEST_F(CudaOpsTest, SoftmaxXentAtTheGpt2VocabularyMatchesHostAndRepeats) {
  const int64_t rows = 8, cols = 50257;
  Pair logits = upload(random_vector(rows * cols, 1, -8.0f, 8.0f), {rows, cols});
  std::vector<int32_t> label_values = random_labels(rows, static_cast<int32_t>(cols), 2);
  label_values[0] = 0;
  label_values[1] = static_cast<int32_t>(cols - 1);
  label_values[2] = kIgnoreLabel;
  Pair labels = upload_i32(label_values, {rows});
  Pair loss = empty({1}, DType::kF32);
  Pair dlogits = empty({rows, cols}, DType::kF32);
  run_both([&](DeviceKind k, Stream& s, auto side) {
    ops_of<SoftmaxXentOps>(k).softmax_xent(side(logits).f32(), side(labels).i32(), rows, cols,
                                           1.0f / rows, nullptr, side(loss).f32(),
                                           side(dlogits).f32(), s);
  });
  expect_close(loss);
  expect_close(dlogits, kRtol, 1e-7);
  const auto first_loss = cuda_values(loss), first_grad = cuda_values(dlogits);
  ops_of<SoftmaxXentOps>(DeviceKind::kCuda)
      .softmax_xent(logits.cuda.f32(), labels.cuda.i32(), rows, cols, 1.0f / rows, nullptr,
                    loss.cuda.f32(), dlogits.cuda.f32(), *cuda_);
  EXPECT_TRUE(bitwise_equal(cuda_values(loss), first_loss));
  EXPECT_TRUE(bitwise_equal(cuda_values(dlogits), first_grad));
}

// Both backends fail alike on a bad label: the same message, raised by the stream at its next
// synchronize (CUDA through the stream's DeviceFault), and the stream is usable afterwards.
TEST_F(CudaOpsTest, InvalidLabelIsTheSameErrorOnBothBackends) {
  const int64_t rows = 4, cols = 5;
  Pair logits = upload(random_vector(rows * cols, 1), {rows, cols});
  Pair bad = upload_i32({0, 7, 2, 1}, {rows});
  Pair good = upload_i32({0, 4, 2, 1}, {rows});
  Pair loss = empty({1}, DType::kF32), dlogits = empty({rows, cols}, DType::kF32);
  Pair correct = empty({1}, DType::kI32);
  std::vector<std::string> messages;
  run_both([&](DeviceKind, Stream& stream, auto side) {
    softmax_xent(side(logits), side(bad), side(loss), side(dlogits), 1.0f, stream);
    messages.push_back(error_of([&] { stream.synchronize(); }));
    count_correct(side(logits), side(bad), side(correct), stream);
    messages.push_back(error_of([&] { stream.synchronize(); }));
    softmax_xent(side(logits), side(good), side(loss), side(dlogits), 1.0f, stream);
    messages.push_back(error_of([&] { stream.synchronize(); }));
  });
  ASSERT_EQ(messages.size(), 6u);
  EXPECT_TRUE(contains(messages[0], "softmax_xent: label 7 in row 1 is outside [0, 5)"));
  EXPECT_TRUE(contains(messages[1], "count_correct: label 7 in row 1 is outside [0, 5)"));
  EXPECT_EQ(messages[2], "<no error>");
  // Same text up to the thread context and source location, which name each backend's.
  const auto text = [](const std::string& m) {
    return m.substr(0, std::min(m.find(" ["), m.find(" (")));
  };
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(text(messages[i]), text(messages[i + 3]));
}

TEST_F(CudaOpsTest, CountCorrectMatchesHostIncludingTies) {
  for (auto [rows, cols] : kXentShapes) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    auto x = random_vector(rows * cols, 1, 0.0f, 3.0f);
    for (float& v : x) v = std::floor(v);  // many ties: the first maximum must win
    const auto labels = random_labels(rows, static_cast<int32_t>(cols), 2);
    Pair logits = upload(x, {rows, cols});
    Pair tl = upload_i32(labels, {rows});
    Pair correct = upload_i32({-5}, {1});  // overwritten, not accumulated
    run_both([&](DeviceKind k, Stream& s, auto side) {
      ops_of<SoftmaxXentOps>(k).count_correct(side(logits).f32(), side(tl).i32(), rows, cols,
                                              side(correct).i32(), s);
    });
    EXPECT_EQ(correct.host.to_host_i32(*host_), correct.cuda.to_host_i32(*cuda_));
  }
}

// ---- optimizers ------------------------------------------------------------------------------

TEST_F(CudaOpsTest, SgdMatchesHostWithAndWithoutMomentum) {
  for (int64_t n : kSizes) {
    for (float momentum : {0.0f, 0.9f}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " momentum=" << momentum);
      const SgdConfig config{0.1f, momentum, 0.01f};
      Pair param = upload(random_vector(n, 1), {n});
      Pair buf = upload(std::vector<float>(n, 0.0f), {n});
      Pair param16 = empty({n}, DType::kBF16);
      for (int step = 0; step < 3; ++step) {
        Pair grad = upload(random_vector(n, 10 + step), {n});
        run_both([&](DeviceKind k, Stream& s, auto side) {
          ops_of<OptimOps>(k).sgd_step(
              side(param).f32(), side(grad).f32(), momentum != 0.0f ? side(buf).f32() : nullptr,
              step == 2 ? side(param16).bf16() : nullptr, n, config, nullptr, s);
        });
      }
      expect_close(param);
      expect_close(buf);
      expect_bf16_rounding(param, param16);
    }
  }
}

TEST_F(CudaOpsTest, AdamWMatchesHost) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const AdamWConfig config{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
    Pair param = upload(random_vector(n, 1), {n});
    Pair m = upload(std::vector<float>(n, 0.0f), {n});
    Pair v = upload(std::vector<float>(n, 0.0f), {n});
    Pair param16 = empty({n}, DType::kBF16);
    for (int64_t step = 1; step <= 3; ++step) {
      Pair grad = upload(random_vector(n, 10 + static_cast<uint32_t>(step)), {n});
      run_both([&](DeviceKind k, Stream& s, auto side) {
        ops_of<OptimOps>(k).adamw_step(side(param).f32(), side(grad).f32(), side(m).f32(),
                                       side(v).f32(), step == 3 ? side(param16).bf16() : nullptr, n,
                                       config, step, nullptr, s);
      });
    }
    expect_close(param, 1e-5, 1e-6);
    expect_bf16_rounding(param, param16);
    expect_close(m);
    expect_close(v, kRtol, 1e-9);
  }
}

// ---- streams, events, allocator --------------------------------------------------------------

class CudaRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_availability().device_count == 0)
      GTEST_SKIP() << cuda_availability().reason_unavailable;
  }
};

TEST_F(CudaRuntimeTest, EventOrdersWorkAcrossStreams) {
  DeviceRuntime& rt = device_runtime(kCuda0);
  auto producer = rt.create_stream();
  auto consumer = rt.create_stream();
  auto ready = rt.create_event();
  const int64_t n = 1 << 22;  // enough work that an unordered read would see a partial result
  Tensor ones = Tensor::from_host(std::vector<float>(n, 1.0f), {n}, kCuda0, *producer);
  Tensor x = Tensor::empty({n}, DType::kF32, kCuda0);
  Tensor zero = Tensor::from_host(std::vector<float>(n, 0.0f), {n}, kCuda0, *producer);
  Tensor y = Tensor::empty({n}, DType::kF32, kCuda0);
  DeviceKind k = DeviceKind::kCuda;
  ops_of<ElementwiseOps>(k).fill(x.f32(), n, 1.0f, *producer);
  for (int i = 0; i < 50; ++i)
    ops_of<ElementwiseOps>(k).axpy(1.0f, ones.f32(), x.f32(), n, *producer);  // x = 51
  producer->record(*ready);
  consumer->wait(*ready);
  ops_of<ElementwiseOps>(k).add(x.f32(), zero.f32(), y.f32(), n, *consumer);
  const auto got = y.to_host_f32(*consumer);
  EXPECT_TRUE(ready->query());
  EXPECT_TRUE(all_close(got, std::vector<double>(n, 51.0), 0.0, 0.0));
  producer->synchronize();
}

TEST_F(CudaRuntimeTest, EventsTimeWorkAndUnrecordedEventsAreComplete) {
  DeviceRuntime& rt = device_runtime(kCuda0);
  auto stream = rt.create_stream();
  auto start = rt.create_event();
  auto end = rt.create_event();
  EXPECT_TRUE(end->query());  // never recorded
  const int64_t n = 1 << 20;
  Tensor x = Tensor::empty({n}, DType::kF32, kCuda0);
  stream->record(*start);
  for (int i = 0; i < 10; ++i)
    ops_of<ElementwiseOps>(DeviceKind::kCuda).fill(x.f32(), n, static_cast<float>(i), *stream);
  stream->record(*end);
  end->synchronize();
  EXPECT_TRUE(end->query());
  EXPECT_GE(end->elapsed_ms_since(*start), 0.0);
  stream->check();
}

TEST_F(CudaRuntimeTest, AbortEndsWaitsAndRefusesNewWork) {
  DeviceRuntime& rt = device_runtime(kCuda0);
  auto stream = rt.create_stream();
  Tensor x = Tensor::empty({16}, DType::kF32, kCuda0);
  ops_of<ElementwiseOps>(DeviceKind::kCuda).fill(x.f32(), 16, 1.0f, *stream);
  stream->synchronize();
  stream->abort();
  EXPECT_TRUE(contains(error_of([&] { stream->synchronize(); }), "stream aborted"));
  EXPECT_TRUE(contains(
      error_of([&] { ops_of<ElementwiseOps>(DeviceKind::kCuda).fill(x.f32(), 16, 1.0f, *stream); }),
      "stream aborted"));
}

TEST_F(CudaRuntimeTest, RejectsStreamsAndEventsOfOtherBackends) {
  auto cuda_stream = device_runtime(kCuda0).create_stream();
  auto host_stream = device_runtime(host0()).create_stream();
  auto host_event = device_runtime(host0()).create_event();
  EXPECT_NE(error_of([&] { cuda_stream->record(*host_event); }), "<no error>");
  Tensor x = Tensor::empty({4}, DType::kF32, kCuda0);
  EXPECT_NE(error_of([&] {
              ops_of<ElementwiseOps>(DeviceKind::kCuda).fill(x.f32(), 4, 0.0f, *host_stream);
            }),
            "<no error>");
}

TEST_F(CudaRuntimeTest, AllocatorReusesBlocksAfterWarmUp) {
  CachingAllocator& allocator = device_runtime(kCuda0).allocator();
  for (int i = 0; i < 2; ++i) Tensor::empty({12345}, DType::kF32, kCuda0);  // warm-up
  const AllocatorStats before = allocator.stats();
  for (int i = 0; i < 20; ++i) {
    Tensor a = Tensor::empty({12345}, DType::kF32, kCuda0);
    Tensor b = Tensor::empty({777}, DType::kF32, kCuda0);
  }
  const AllocatorStats after = allocator.stats();
  EXPECT_LE(after.system_allocs - before.system_allocs, 1);  // at most b's first block
  EXPECT_GE(after.cache_hits - before.cache_hits, 39);
}

TEST_F(CudaRuntimeTest, OutOfRangeDeviceIsAClearError) {
  const int count = cuda_availability().device_count;
  const std::string error = error_of([&] { device_runtime(Device{DeviceKind::kCuda, count}); });
  EXPECT_TRUE(contains(error, "does not exist"));
}

// Runs everywhere: without a usable GPU, the reason must say why, and using cuda:0 must fail
// with that reason.
TEST(CudaAvailability, ExplainsItself) {
  const CudaAvailability cuda = cuda_availability();
  if (cuda.device_count > 0) {
    EXPECT_TRUE(built_with_cuda());
    EXPECT_TRUE(cuda.reason_unavailable.empty());
    return;
  }
  EXPECT_FALSE(cuda.reason_unavailable.empty());
  if (!built_with_cuda()) {
    EXPECT_TRUE(contains(cuda.reason_unavailable, "without the CUDA backend"));
  }
  EXPECT_TRUE(contains(error_of([] { device_runtime(kCuda0); }), cuda.reason_unavailable));
}

}  // namespace
}  // namespace ls::test
