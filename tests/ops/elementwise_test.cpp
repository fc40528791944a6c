// Element-wise ops (relu, gelu, bias add/grad, fill, scale, axpy, add, bf16 casts) against plain
// double references on sizes 1, odd and past the host grain; accumulate on and off; finite-
// difference checks of relu (away from the kink), gelu and bias_add; bf16 rounding (ties to
// even, NaN, Inf); results bitwise independent of how the work is chunked; argument errors.
#include "ops/elementwise.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include <lockstep/dtype.h>
#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/host/host_ops.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

const std::vector<int64_t> kSizes = {1, 7, 1000, kHostGrain + 1};

double gelu_ref(double x) {
  const double s = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

double gelu_grad_ref(double x) {
  const double s = std::sqrt(2.0 / std::numbers::pi);
  const double t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

double gelu_erf_grad_ref(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}

class ActivationOpTest : public OpTestBase {};

TEST_F(ActivationOpTest, ReluMatchesReference) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 1, -2, 2);
    const auto dy = random_vector(n, 2);
    const auto dx0 = random_vector(n, 3);
    Tensor tx = upload(x, {n});
    Tensor ty = Tensor::empty({n}, DType::kF32, dev_);
    relu(tx, ty, *stream_);
    std::vector<double> want(n), grad(n), grad_acc(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = x[i] > 0 ? x[i] : 0.0;
      grad[i] = x[i] > 0 ? dy[i] : 0.0;
      grad_acc[i] = static_cast<float>(dx0[i] + grad[i]);  // one f32 add, exact in the kernel
    }
    EXPECT_TRUE(all_close(download(ty), want, 0, 0)) << "n=" << n;
    for (bool accumulate : {false, true}) {
      Tensor tdx = upload(dx0, {n});
      relu_backward(tx, upload(dy, {n}), tdx, accumulate, *stream_);
      EXPECT_TRUE(all_close(download(tdx), accumulate ? grad_acc : grad, 0, 0))
          << "n=" << n << " accumulate=" << accumulate;
    }
  }
}

TEST_F(ActivationOpTest, GeluMatchesReference) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 4, -6, 6);
    const auto dy = random_vector(n, 5);
    const auto dx0 = random_vector(n, 6);
    Tensor tx = upload(x, {n});
    Tensor ty = Tensor::empty({n}, DType::kF32, dev_);
    gelu(tx, ty, *stream_);
    std::vector<double> want(n), grad(n), grad_acc(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = gelu_ref(x[i]);
      grad[i] = dy[i] * gelu_grad_ref(x[i]);
      grad_acc[i] = dx0[i] + grad[i];
    }
    EXPECT_TRUE(all_close(download(ty), want, 2e-6, 1e-6)) << "n=" << n;
    for (bool accumulate : {false, true}) {
      Tensor tdx = upload(dx0, {n});
      gelu_backward(tx, upload(dy, {n}), tdx, accumulate, *stream_);
      EXPECT_TRUE(all_close(download(tdx), accumulate ? grad_acc : grad, 1e-5, 1e-6))
          << "n=" << n << " accumulate=" << accumulate;
    }
  }
}

TEST_F(ActivationOpTest, GeluErfMatchesReference) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 14, -6, 6);
    const auto dy = random_vector(n, 15);
    const auto dx0 = random_vector(n, 16);
    Tensor tx = upload(x, {n});
    Tensor ty = Tensor::empty({n}, DType::kF32, dev_);
    gelu_erf(tx, ty, *stream_);
    std::vector<double> want(n), grad(n), grad_acc(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = gelu_erf_ref(x[i]);
      grad[i] = dy[i] * gelu_erf_grad_ref(x[i]);
      grad_acc[i] = dx0[i] + grad[i];
    }
    EXPECT_TRUE(all_close(download(ty), want, 2e-6, 1e-6)) << "n=" << n;
    for (bool accumulate : {false, true}) {
      Tensor tdx = upload(dx0, {n});
      gelu_erf_backward(tx, upload(dy, {n}), tdx, accumulate, *stream_);
      EXPECT_TRUE(all_close(download(tdx), accumulate ? grad_acc : grad, 1e-5, 1e-6))
          << "n=" << n << " accumulate=" << accumulate;
    }
  }
}

TEST_F(ActivationOpTest, TanhMatchesReferenceAndItsBackwardUsesTheOutput) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 24, -12, 12);
    const auto dy = random_vector(n, 25);
    const auto dx0 = random_vector(n, 26);
    Tensor tx = upload(x, {n});
    Tensor ty = Tensor::empty({n}, DType::kF32, dev_);
    ls::tanh(tx, ty, *stream_);
    std::vector<double> want(n), grad(n), grad_acc(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = std::tanh(static_cast<double>(x[i]));
      grad[i] = dy[i] * (1.0 - want[i] * want[i]);
      grad_acc[i] = dx0[i] + grad[i];
    }
    EXPECT_TRUE(all_close(download(ty), want, 0, 3e-7)) << "n=" << n;
    for (bool accumulate : {false, true}) {
      Tensor tdx = upload(dx0, {n});
      tanh_backward(ty, upload(dy, {n}), tdx, accumulate, *stream_);
      EXPECT_TRUE(all_close(download(tdx), accumulate ? grad_acc : grad, 1e-5, 1e-6))
          << "n=" << n << " accumulate=" << accumulate;
    }
  }
}

TEST_F(ActivationOpTest, GeluErfGradientMatchesFiniteDifferences) {
  const auto x = random_vector(33, 17, -3, 3);
  const auto w = random_vector(x.size(), 18);
  const auto n = static_cast<int64_t>(x.size());
  Tensor y = Tensor::empty({n}, DType::kF32, dev_);
  auto loss = [&](const std::vector<float>& xv) {
    gelu_erf(upload(xv, {n}), y, *stream_);
    return dot(download(y), w);
  };
  Tensor dx = Tensor::empty({n}, DType::kF32, dev_);
  gelu_erf_backward(upload(x, {n}), upload(w, {n}), dx, false, *stream_);
  EXPECT_TRUE(all_close(download(dx), fd_gradient(loss, x, 1e-2f), 1e-2, 1e-3));
  const std::string msg =
      error_of([&] { gelu_erf_backward(upload(x, {n}), y, y.view(0, {3}), false, *stream_); });
  EXPECT_TRUE(contains(msg, "gelu_erf_backward: dx is f32[3]"));
}

TEST_F(ActivationOpTest, InPlaceForwardMatches) {
  const auto x = random_vector(100, 7, -2, 2);
  Tensor t = upload(x, {100});
  Tensor out = Tensor::empty({100}, DType::kF32, dev_);
  gelu(t, out, *stream_);
  gelu(t, t, *stream_);
  EXPECT_TRUE(bitwise_equal(download(t), download(out)));
}

// dL/dx for L = sum(w . act(x)) from the backward kernel vs central differences of the forward.
void check_activation_gradient(Stream& stream, Device dev, const std::vector<float>& x,
                               bool use_gelu) {
  const auto n = static_cast<int64_t>(x.size());
  const auto w = random_vector(x.size(), 8);
  auto loss = [&](const std::vector<float>& xv) {
    Tensor y = Tensor::empty({n}, DType::kF32, dev);
    Tensor tx = Tensor::from_host(xv, {n}, dev, stream);
    use_gelu ? gelu(tx, y, stream) : relu(tx, y, stream);
    return dot(y.to_host_f32(stream), w);
  };
  Tensor tx = Tensor::from_host(x, {n}, dev, stream);
  Tensor tw = Tensor::from_host(w, {n}, dev, stream);
  Tensor dx = Tensor::empty({n}, DType::kF32, dev);
  use_gelu ? gelu_backward(tx, tw, dx, false, stream) : relu_backward(tx, tw, dx, false, stream);
  EXPECT_TRUE(all_close(dx.to_host_f32(stream), fd_gradient(loss, x, 1e-2f), 1e-2, 1e-3))
      << (use_gelu ? "gelu" : "relu");
}

TEST_F(ActivationOpTest, GradientsMatchFiniteDifferences) {
  // relu: |x| >= 0.1 so that x +- eps never crosses the kink at 0.
  auto x = random_vector(33, 9, 0.1f, 1.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  check_activation_gradient(*stream_, dev_, x, false);
  check_activation_gradient(*stream_, dev_, random_vector(33, 10, -3, 3), true);
}

class BiasOpTest : public OpTestBase {};

const std::vector<std::pair<int64_t, int64_t>> kBiasShapes = {
    {1, 1}, {3, 5}, {17, 33}, {128, 784}, {2, 300}};

TEST_F(BiasOpTest, BiasAddMatchesReference) {
  for (auto [rows, cols] : kBiasShapes) {
    const auto y = random_vector(rows * cols, 1);
    const auto b = random_vector(cols, 2);
    Tensor ty = upload(y, {rows, cols});
    bias_add(ty, upload(b, {cols}), *stream_);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = y[r * cols + c] + b[c];
    }
    EXPECT_TRUE(all_close(download(ty), want, 1e-7, 0)) << rows << "x" << cols;
  }
}

TEST_F(BiasOpTest, BiasGradMatchesReference) {
  for (auto [rows, cols] : kBiasShapes) {
    const auto dy = random_vector(rows * cols, 3);
    const auto db0 = random_vector(cols, 4);
    for (bool accumulate : {false, true}) {
      Tensor tdb = upload(db0, {cols});
      bias_grad(upload(dy, {rows, cols}), tdb, accumulate, *stream_);
      std::vector<double> want(cols);
      for (int64_t c = 0; c < cols; ++c) {
        double sum = accumulate ? db0[c] : 0.0;
        for (int64_t r = 0; r < rows; ++r) sum += dy[r * cols + c];
        want[c] = sum;
      }
      EXPECT_TRUE(all_close(download(tdb), want, 1e-5, 1e-5 * rows))
          << rows << "x" << cols << " accumulate=" << accumulate;
    }
  }
}

// L = sum(w . (y + bias)): dL/dbias = bias_grad(w), checked against central differences.
TEST_F(BiasOpTest, BiasGradientMatchesFiniteDifferences) {
  const int64_t rows = 5, cols = 7;
  const auto y = random_vector(rows * cols, 5);
  const auto w = random_vector(rows * cols, 6);
  const auto b = random_vector(cols, 7);
  auto loss = [&](const std::vector<float>& bv) {
    Tensor ty = upload(y, {rows, cols});
    bias_add(ty, upload(bv, {cols}), *stream_);
    return dot(download(ty), w);
  };
  Tensor db = Tensor::empty({cols}, DType::kF32, dev_);
  bias_grad(upload(w, {rows, cols}), db, false, *stream_);
  EXPECT_TRUE(all_close(download(db), fd_gradient(loss, b, 1e-2f), 1e-2, 1e-3));
}

TEST_F(BiasOpTest, ArgumentErrors) {
  Tensor y = Tensor::empty({4, 3}, DType::kF32, dev_);
  std::string msg = error_of([&] { bias_add(y, Tensor::empty({4}, DType::kF32, dev_), *stream_); });
  EXPECT_TRUE(contains(msg, "bias_add: bias is f32[4]"));
  EXPECT_TRUE(contains(msg, "expected [3]"));
  msg = error_of([&] { bias_grad(Tensor::empty({12}, DType::kF32, dev_), y, false, *stream_); });
  EXPECT_TRUE(contains(msg, "bias_grad: dy is f32[12]"));
  EXPECT_THROW(bias_add(y, Tensor(), *stream_), Error);
}

class ElementwiseTest : public OpTestBase {};

TEST_F(ElementwiseTest, FillScaleAxpyAddMatchReference) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, 1);
    const auto y = random_vector(n, 2);
    Tensor tx = upload(x, {n});
    Tensor ty = upload(y, {n});
    Tensor out = Tensor::empty({n}, DType::kF32, dev_);
    add(tx, ty, out, *stream_);
    std::vector<double> sum(n), axpy_want(n), scaled(n);
    for (int64_t i = 0; i < n; ++i) {
      sum[i] = static_cast<float>(x[i] + y[i]);
      axpy_want[i] = static_cast<float>(y[i] + static_cast<float>(-0.5f * x[i]));
      scaled[i] = static_cast<float>(3.0f * x[i]);
    }
    EXPECT_TRUE(all_close(download(out), sum, 0, 0));
    add(tx, ty, tx, *stream_);  // in place: out is a
    EXPECT_TRUE(all_close(download(tx), sum, 0, 0));
    axpy(-0.5f, upload(x, {n}), ty, *stream_);
    EXPECT_TRUE(all_close(download(ty), axpy_want, 0, 0));
    Tensor ts = upload(x, {n});
    scale(ts, 3.0f, *stream_);
    EXPECT_TRUE(all_close(download(ts), scaled, 0, 0));
    fill(ts, 0.25f, *stream_);
    EXPECT_TRUE(all_close(download(ts), std::vector<double>(n, 0.25), 0, 0));
  }
}

TEST_F(ElementwiseTest, CountNonfiniteAsI32AndAsF32) {
  for (int64_t n : kSizes) {
    std::vector<float> x = random_vector(n, 3);
    int expected = 0;
    for (int64_t i = 0; i < n; i += 5) {  // NaN, +Inf and -Inf in turn
      x[static_cast<size_t>(i)] = i % 3 == 0   ? std::numeric_limits<float>::quiet_NaN()
                                  : i % 3 == 1 ? std::numeric_limits<float>::infinity()
                                               : -std::numeric_limits<float>::infinity();
      ++expected;
    }
    Tensor tx = upload(x, {n});
    Tensor as_i32 = Tensor::empty({1}, DType::kI32, dev_);
    Tensor as_f32 = Tensor::empty({1}, DType::kF32, dev_);
    count_nonfinite(tx, as_i32, *stream_);
    count_nonfinite(tx, as_f32, *stream_);
    int32_t got_i32 = -1;
    as_i32.copy_to_host_async(&got_i32, sizeof got_i32, *stream_);
    stream_->synchronize();
    EXPECT_EQ(got_i32, expected) << "n=" << n;
    EXPECT_EQ(as_f32.to_host_f32(*stream_)[0], static_cast<float>(expected)) << "n=" << n;
  }
  Tensor bad = Tensor::empty({1}, DType::kBF16, dev_);
  EXPECT_THROW(count_nonfinite(upload({1.0f}, {1}), bad, *stream_), Error);
}

uint16_t bits_of_bf16(const Tensor& t, Stream& stream) {
  Tensor f = Tensor::empty(t.shape(), DType::kF32, t.device());
  cast(t, f, stream);
  const float v = f.to_host_f32(stream)[0];
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST_F(ElementwiseTest, CastRoundsToNearestEvenAndRoundTrips) {
  // f32 bit pattern -> expected bf16 bits (upper half after rounding).
  const std::vector<std::pair<uint32_t, uint16_t>> cases = {
      {0x3f800000u, 0x3f80},  // 1.0 exact
      {0x3f808000u, 0x3f80},  // halfway, lower is even: down
      {0x3f818000u, 0x3f82},  // halfway, lower is odd: up to even
      {0x3f808001u, 0x3f81},  // just above halfway: up
      {0x3f807fffu, 0x3f80},  // just below halfway: down
      {0xbf818000u, 0xbf82},  // negative, halfway to even
      {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to +Inf
      {0x7f800000u, 0x7f80},  // +Inf stays Inf
      {0xff800000u, 0xff80},  // -Inf
      {0x00000001u, 0x0000},  // smallest denormal rounds to +0
  };
  for (auto [in, want] : cases) {
    Tensor src = upload({from_bits(in)}, {1});
    Tensor dst = Tensor::empty({1}, DType::kBF16, dev_);
    cast(src, dst, *stream_);
    EXPECT_EQ(bits_of_bf16(dst, *stream_), want) << std::hex << "f32 bits 0x" << in;
  }
  Tensor nan_src = upload({std::numeric_limits<float>::quiet_NaN()}, {1});
  Tensor nan_dst = Tensor::empty({1}, DType::kBF16, dev_);
  cast(nan_src, nan_dst, *stream_);
  Tensor back = Tensor::empty({1}, DType::kF32, dev_);
  cast(nan_dst, back, *stream_);
  EXPECT_TRUE(std::isnan(download(back)[0]));

  // Values already representable in bf16 survive f32 -> bf16 -> f32 exactly.
  for (int64_t n : kSizes) {
    auto x = random_vector(n, 3, -100, 100);
    for (float& v : x) v = bf16_to_f32(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
    Tensor half = Tensor::empty({n}, DType::kBF16, dev_);
    Tensor round = Tensor::empty({n}, DType::kF32, dev_);
    cast(upload(x, {n}), half, *stream_);
    cast(half, round, *stream_);
    EXPECT_TRUE(bitwise_equal(download(round), x)) << "n=" << n;
  }
}

// Runs `op(in, out)` over the whole range and over pieces split at offsets that are not chunk
// boundaries; every element's result must be bitwise the same.
template <typename Op>
void expect_chunking_invariant(Stream& stream, Device dev, int64_t n, Op op, const char* name) {
  const auto x = random_vector(n, 17, -3, 3);
  Tensor in = Tensor::from_host(x, {n}, dev, stream);
  Tensor whole = Tensor::from_host(random_vector(n, 18), {n}, dev, stream);
  Tensor pieces = Tensor::from_host(random_vector(n, 18), {n}, dev, stream);
  op(in, whole);
  for (int64_t begin = 0, len = 1; begin < n; begin += len, len = len * 3 + 5) {
    const int64_t count = std::min(len, n - begin);
    op(in.view(begin, {count}), pieces.view(begin, {count}));
  }
  EXPECT_TRUE(bitwise_equal(pieces.to_host_f32(stream), whole.to_host_f32(stream)))
      << name << " n=" << n;
}

TEST_F(ElementwiseTest, ResultsDoNotDependOnChunking) {
  Stream& s = *stream_;
  for (int64_t n : {kHostGrain - 1, kHostGrain, kHostGrain + 1, 3 * kHostGrain + 5}) {
    auto run = [&](auto op, const char* name) { expect_chunking_invariant(s, dev_, n, op, name); };
    run([&](const Tensor& i, const Tensor& o) { relu(i, o, s); }, "relu");
    run([&](const Tensor& i, const Tensor& o) { relu_backward(i, i, o, true, s); }, "relu_bwd");
    run([&](const Tensor& i, const Tensor& o) { gelu(i, o, s); }, "gelu");
    run([&](const Tensor& i, const Tensor& o) { gelu_backward(i, i, o, true, s); }, "gelu_bwd");
    run([&](const Tensor& i, const Tensor& o) { axpy(0.3f, i, o, s); }, "axpy");
    run([&](const Tensor& i, const Tensor& o) { add(i, o, o, s); }, "add");
    run([&](const Tensor&, const Tensor& o) { scale(o, 1.7f, s); }, "scale");
    run(
        [&](const Tensor& i, const Tensor& o) {
          Tensor h = Tensor::empty(i.shape(), DType::kBF16, dev_);
          cast(i, h, s);
          cast(h, o, s);
        },
        "cast");
  }
}

// bias_grad splits columns and bias_add rows across chunks; both must equal a plain f32 loop
// that sums rows in order, bitwise, on widths around the chunk size.
TEST_F(BiasOpTest, ResultsDoNotDependOnChunking) {
  const int64_t rows = 4;
  for (int64_t cols : {int64_t{4095}, int64_t{4096}, int64_t{4097}, int64_t{8200}}) {
    const auto dy = random_vector(rows * cols, 19);
    Tensor db = Tensor::empty({cols}, DType::kF32, dev_);
    bias_grad(upload(dy, {rows, cols}), db, false, *stream_);
    std::vector<float> want(cols, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) want[c] += dy[r * cols + c];
    }
    EXPECT_TRUE(bitwise_equal(download(db), want)) << "cols=" << cols;
  }
}

TEST_F(ElementwiseTest, ArgumentErrors) {
  Tensor x = Tensor::empty({3, 4}, DType::kF32, dev_);
  std::string msg = error_of([&] { relu(x, Tensor::empty({11}, DType::kF32, dev_), *stream_); });
  EXPECT_TRUE(contains(msg, "relu: y is f32[11]"));
  EXPECT_TRUE(contains(msg, "same number of elements (12)"));
  Tensor labels = upload_i32({1, 2, 3}, {3});
  msg = error_of([&] { axpy(1.0f, labels, x, *stream_); });
  EXPECT_TRUE(contains(msg, "axpy: x is i32[3]"));
  EXPECT_TRUE(contains(msg, "expected dtype f32"));
  msg = error_of([&] { cast(x, Tensor::empty({3, 4}, DType::kF32, dev_), *stream_); });
  EXPECT_TRUE(contains(msg, "supported casts are f32 -> bf16 and bf16 -> f32"));
  msg = error_of([&] { add(x, x, Tensor::empty({2}, DType::kF32, dev_), *stream_); });
  EXPECT_TRUE(contains(msg, "add: out is f32[2]"));
  EXPECT_THROW(fill(Tensor(), 1.0f, *stream_), Error);

  // A tensor on another host device than the stream's.
  const Device other{DeviceKind::kHost, 1};
  Tensor elsewhere = Tensor::empty({3, 4}, DType::kF32, other);
  msg = error_of([&] { scale(elsewhere, 2.0f, *stream_); });
  EXPECT_TRUE(contains(msg, "on host:1 but the stream runs on host:0"));
}

}  // namespace
}  // namespace ls::test
