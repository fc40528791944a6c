// sgd_step and adamw_step over 3 steps against a double-precision reference written from
// PyTorch's update rules, plus hand-computed values; results bitwise independent of chunking;
// argument and hyper-parameter errors.
#include "ops/optim.h"

#include <gtest/gtest.h>

#include <cmath>

#include <lockstep/dtype.h>
#include "ops/host/host_ops.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

const std::vector<int64_t> kSizes = {1, 7, 1000, kHostGrain + 1};
constexpr int kSteps = 3;

// PyTorch SGD (dampening 0, no Nesterov): g += wd p; buf = momentum buf + g (buf = g at step 1);
// p -= lr buf (or lr g without momentum).
void reference_sgd(std::vector<double>& p, std::vector<double>& buf, const std::vector<float>& g,
                   const SgdConfig& c) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double d = g[i] + static_cast<double>(c.weight_decay) * p[i];
    buf[i] = c.momentum == 0.0f ? d : c.momentum * buf[i] + d;
    p[i] -= static_cast<double>(c.lr) * buf[i];
  }
}

// PyTorch AdamW: p *= 1 - lr wd; m, v moving averages; p -= lr m_hat / (sqrt(v_hat) + eps).
void reference_adamw(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                     const std::vector<float>& g, const AdamWConfig& c, int64_t step) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(step));
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] *= 1.0 - static_cast<double>(c.lr) * c.weight_decay;
    m[i] = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
    v[i] = c.beta2 * v[i] + (1.0 - c.beta2) * g[i] * g[i];
    p[i] -= c.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps);
  }
}

class OptimTest : public OpTestBase {};

TEST_F(OptimTest, SgdMatchesReference) {
  const std::vector<SgdConfig> configs = {
      {0.1f, 0.0f, 0.0f}, {0.05f, 0.0f, 0.01f}, {0.1f, 0.9f, 0.0f}, {0.02f, 0.8f, 0.05f}};
  for (const SgdConfig& config : configs) {
    for (int64_t n : kSizes) {
      const auto p0 = random_vector(n, 1);
      Tensor param = upload(p0, {n});
      Tensor buf = upload(std::vector<float>(n, 0.0f), {n});
      std::vector<double> want = to_double(p0), want_buf(n, 0.0);
      for (int step = 1; step <= kSteps; ++step) {
        const auto g = random_vector(n, 100 + step);
        sgd_step(param, upload(g, {n}), config.momentum == 0.0f ? Tensor() : buf, config, *stream_);
        reference_sgd(want, want_buf, g, config);
      }
      EXPECT_TRUE(all_close(download(param), want, 1e-6, 1e-7))
          << "n=" << n << " lr=" << config.lr << " momentum=" << config.momentum
          << " wd=" << config.weight_decay;
    }
  }
}

TEST_F(OptimTest, AdamWMatchesReference) {
  const std::vector<AdamWConfig> configs = {
      {}, {0.01f, 0.8f, 0.99f, 1e-6f, 0.0f}, {0.05f, 0.9f, 0.999f, 1e-8f, 0.1f}};
  for (const AdamWConfig& config : configs) {
    for (int64_t n : kSizes) {
      const auto p0 = random_vector(n, 2);
      Tensor param = upload(p0, {n});
      Tensor m = upload(std::vector<float>(n, 0.0f), {n});
      Tensor v = upload(std::vector<float>(n, 0.0f), {n});
      std::vector<double> want = to_double(p0), want_m(n, 0.0), want_v(n, 0.0);
      for (int step = 1; step <= kSteps; ++step) {
        const auto g = random_vector(n, 200 + step);
        adamw_step(param, upload(g, {n}), m, v, config, step, *stream_);
        reference_adamw(want, want_m, want_v, g, config, step);
      }
      EXPECT_TRUE(all_close(download(param), want, 1e-5, 1e-6))
          << "n=" << n << " lr=" << config.lr << " wd=" << config.weight_decay;
      EXPECT_TRUE(all_close(download(m), want_m, 1e-5, 1e-7)) << "n=" << n;
      EXPECT_TRUE(all_close(download(v), want_v, 1e-5, 1e-9)) << "n=" << n;
    }
  }
}

// Worked by hand: p = 1, gradient 0.5 at every step.
TEST_F(OptimTest, HandComputedSteps) {
  Tensor grad = upload({0.5f}, {1});
  {
    // SGD lr 0.1, momentum 0.9: buf = 0.5, 0.95, 1.355; p = 0.95, 0.855, 0.7195.
    Tensor p = upload({1.0f}, {1});
    Tensor buf = upload({0.0f}, {1});
    const std::vector<double> want = {0.95, 0.855, 0.7195};
    for (int step = 0; step < kSteps; ++step) {
      sgd_step(p, grad, buf, SgdConfig{0.1f, 0.9f, 0.0f}, *stream_);
      EXPECT_TRUE(all_close(download(p), {want[step]}, 1e-6, 0)) << "sgd step " << step + 1;
    }
  }
  {
    // AdamW lr 0.1, wd 0.1: with a constant gradient m_hat = 0.5 and sqrt(v_hat) = 0.5, so each
    // step is p = 0.99 p - 0.1 * 0.5 / (0.5 + 1e-8): 0.89, 0.7811, 0.673289.
    Tensor p = upload({1.0f}, {1});
    Tensor m = upload({0.0f}, {1});
    Tensor v = upload({0.0f}, {1});
    const std::vector<double> want = {0.89, 0.7811, 0.673289};
    for (int step = 1; step <= kSteps; ++step) {
      adamw_step(p, grad, m, v, AdamWConfig{0.1f, 0.9f, 0.999f, 1e-8f, 0.1f}, step, *stream_);
      EXPECT_TRUE(all_close(download(p), {want[step - 1]}, 1e-6, 0)) << "adamw step " << step;
    }
  }
}

// The whole tensor in one call vs pieces at offsets that are not chunk boundaries: bitwise equal.
TEST_F(OptimTest, ResultsDoNotDependOnChunking) {
  const SgdConfig sgd{0.1f, 0.9f, 0.01f};
  const AdamWConfig adamw{};
  for (int64_t n : {kHostGrain - 1, kHostGrain, kHostGrain + 1, 3 * kHostGrain + 5}) {
    const auto p0 = random_vector(n, 3);
    const std::vector<float> zeros(n, 0.0f);
    Tensor grad = upload(random_vector(n, 4), {n});
    // [0]: updated in one call; [1]: updated piece by piece.
    Tensor sgd_p[2], sgd_buf[2], adam_p[2], adam_m[2], adam_v[2];
    for (int k = 0; k < 2; ++k) {
      sgd_p[k] = upload(p0, {n});
      sgd_buf[k] = upload(zeros, {n});
      adam_p[k] = upload(p0, {n});
      adam_m[k] = upload(zeros, {n});
      adam_v[k] = upload(zeros, {n});
    }
    for (int step = 1; step <= 2; ++step) {
      sgd_step(sgd_p[0], grad, sgd_buf[0], sgd, *stream_);
      adamw_step(adam_p[0], grad, adam_m[0], adam_v[0], adamw, step, *stream_);
      for (int64_t begin = 0, len = 1; begin < n; begin += len, len = len * 3 + 5) {
        const int64_t count = std::min(len, n - begin);
        auto piece = [&](const Tensor& t) { return t.view(begin, {count}); };
        sgd_step(piece(sgd_p[1]), piece(grad), piece(sgd_buf[1]), sgd, *stream_);
        adamw_step(piece(adam_p[1]), piece(grad), piece(adam_m[1]), piece(adam_v[1]), adamw, step,
                   *stream_);
      }
    }
    for (Tensor* t : {sgd_p, sgd_buf, adam_p, adam_m, adam_v}) {
      EXPECT_TRUE(bitwise_equal(download(t[1]), download(t[0]))) << "n=" << n;
    }
  }
}

// The bf16 copy written in the step's own pass (ops/optim.h, param16): exactly f32_to_bf16 of
// every updated parameter, at sizes around the 2048-element rounding blocks and the chunk grain,
// while the parameters and state stay bitwise those of the step without a copy.
TEST_F(OptimTest, Bf16CopyIsTheRoundingOfTheUpdatedParameters) {
  for (const bool adamw : {false, true}) {
    for (int64_t n : {int64_t{1}, int64_t{2047}, int64_t{2049}, kHostGrain + 3001}) {
      SCOPED_TRACE(testing::Message() << (adamw ? "adamw" : "sgd") << " n=" << n);
      const std::vector<float> p0 = random_vector(n, 3);
      Tensor with = upload(p0, {n}), without = upload(p0, {n});
      Tensor state[2][2];
      for (auto& pair : state)
        for (Tensor& t : pair) t = upload(std::vector<float>(n, 0.0f), {n});
      const Tensor copy = Tensor::empty({n}, DType::kBF16, dev_);  // every element gets written
      for (int64_t step = 1; step <= 2; ++step) {
        const Tensor grad = upload(random_vector(n, 20 + static_cast<uint32_t>(step)), {n});
        if (adamw) {
          adamw_step(with, grad, state[0][0], state[0][1], AdamWConfig{}, step, *stream_, Tensor(),
                     copy);
          adamw_step(without, grad, state[1][0], state[1][1], AdamWConfig{}, step, *stream_);
        } else {
          const SgdConfig config{0.1f, 0.9f, 0.01f};
          sgd_step(with, grad, state[0][0], config, *stream_, Tensor(), copy);
          sgd_step(without, grad, state[1][0], config, *stream_);
        }
      }
      const std::vector<float> values = download(with);
      EXPECT_TRUE(bitwise_equal(values, download(without)));
      EXPECT_TRUE(bitwise_equal(download(state[0][0]), download(state[1][0])));
      std::vector<uint16_t> bits(static_cast<size_t>(n));
      copy.copy_to_host_async(bits.data(), bits.size() * sizeof(uint16_t), *stream_);
      stream_->synchronize();
      size_t wrong = 0;
      for (size_t i = 0; i < values.size(); ++i) wrong += bits[i] != f32_to_bf16(values[i]);
      EXPECT_EQ(wrong, 0u);
    }
  }
}

TEST_F(OptimTest, ArgumentErrors) {
  Tensor p = Tensor::empty({10}, DType::kF32, dev_);
  Tensor g = Tensor::empty({10}, DType::kF32, dev_);
  std::string msg = error_of([&] {
    sgd_step(p, g, Tensor(), SgdConfig{0.1f, 0.9f, 0.0f}, *stream_);
  });
  EXPECT_TRUE(contains(msg, "momentum_buf is an undefined Tensor"));
  msg =
      error_of([&] { sgd_step(p, Tensor::empty({9}, DType::kF32, dev_), Tensor(), {}, *stream_); });
  EXPECT_TRUE(contains(msg, "sgd_step: grad is f32[9] on host:0 but param is f32[10]"));
  msg = error_of([&] { sgd_step(p, g, Tensor(), SgdConfig{-1.0f, 0.0f, 0.0f}, *stream_); });
  EXPECT_TRUE(contains(msg, "sgd_step: lr is -1"));
  msg = error_of([&] { adamw_step(p, g, p, g, {}, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "adamw_step: step is 0"));
  msg = error_of([&] {
    adamw_step(p, g, p, g, AdamWConfig{1e-3f, 1.0f, 0.999f, 1e-8f, 0.0f}, 1, *stream_);
  });
  EXPECT_TRUE(contains(msg, "adamw_step: beta1 is 1"));
  msg = error_of(
      [&] { adamw_step(p, g, Tensor::empty({10}, DType::kBF16, dev_), g, {}, 1, *stream_); });
  EXPECT_TRUE(contains(msg, "adamw_step: m is bf16[10]"));
  msg = error_of([&] { sgd_step(p, g, Tensor(), {}, *stream_, Tensor(), g); });
  EXPECT_TRUE(contains(msg, "sgd_step: param16 is f32[10]")) << msg;
  msg = error_of([&] {
    adamw_step(p, g, Tensor::empty({10}, DType::kF32, dev_), Tensor::empty({10}, DType::kF32, dev_),
               {}, 1, *stream_, Tensor(), Tensor::empty({9}, DType::kBF16, dev_));
  });
  EXPECT_TRUE(contains(msg, "adamw_step: param16 is bf16[9] on host:0 but param is f32[10]"))
      << msg;
}

}  // namespace
}  // namespace ls::test
