// fused_attention and its backward (ops/attention.h, host kernels in ops/host/fused_attention.cpp)
// against a double-precision reference of the same attention on head-major operands: causal or
// not, padding keys (rows with no key at all come out 0), blocks of query rows that do and do not
// divide T, f32 and bf16 (on the CPU's bf16 units where it has them, and emulated); results
// repeat bit for bit; argument errors; which devices have the kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/host/onednn_matmul.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

struct Shape3 {
  int64_t batch, heads, t, d;
  int64_t bh() const { return batch * heads; }
  int64_t numel() const { return bh() * t * d; }
};

double as_operand(float x, bool bf16) { return bf16 ? bf16_to_f32(f32_to_bf16(x)) : x; }

struct Expected {
  std::vector<double> out, dq, dk, dv;
};

// out = P v with P = softmax(scale q k^T) over the visible keys; dP = dout v^T,
// dS = scale P (dP - rowsum(dP P)), dq = dS k, dk = dS^T q, dv = P^T dout. In bf16 the operands
// of every product (q, k, v, dout, P, dS) are rounded, the rest is exact.
Expected reference(const Shape3& s, const std::vector<float>& q, const std::vector<float>& k,
                   const std::vector<float>& v, const std::vector<float>& dout,
                   const std::vector<int32_t>& valid, bool causal, bool bf16) {
  const int64_t t = s.t, d = s.d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Expected e{std::vector<double>(q.size()), std::vector<double>(q.size()),
             std::vector<double>(q.size()), std::vector<double>(q.size())};
  for (int64_t h = 0; h < s.bh(); ++h) {
    const int64_t base = h * t * d, batch = h / s.heads;
    const auto x = [&](const std::vector<float>& m, int64_t i, int64_t c) {
      return as_operand(m[static_cast<size_t>(base + i * d + c)], bf16);
    };
    std::vector<double> p(static_cast<size_t>(t * t), 0.0), ds(p.size(), 0.0);
    for (int64_t i = 0; i < t; ++i) {
      const auto seen = [&](int64_t j) {
        return (!causal || j <= i) && (valid.empty() || valid[static_cast<size_t>(batch * t + j)]);
      };
      double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
      std::vector<double> dp(static_cast<size_t>(t), 0.0);
      for (int64_t j = 0; j < t; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < d; ++c) dot += x(q, i, c) * x(k, j, c);
        p[static_cast<size_t>(i * t + j)] = scale * dot;
        if (seen(j)) max = std::max(max, scale * dot);
      }
      for (int64_t j = 0; j < t; ++j) {
        double& pj = p[static_cast<size_t>(i * t + j)];
        pj = seen(j) ? std::exp(pj - max) : 0.0;
        sum += pj;
      }
      double rowdot = 0.0;
      for (int64_t j = 0; j < t; ++j) {
        if (sum > 0.0) p[static_cast<size_t>(i * t + j)] /= sum;
        for (int64_t c = 0; c < d; ++c) dp[j] += x(dout, i, c) * x(v, j, c);
        rowdot += dp[j] * p[static_cast<size_t>(i * t + j)];
      }
      for (int64_t j = 0; j < t; ++j) {
        ds[static_cast<size_t>(i * t + j)] =
            scale * p[static_cast<size_t>(i * t + j)] * (dp[j] - rowdot);
      }
    }
    const auto r = [&](const std::vector<double>& m, int64_t i, int64_t j) {
      return as_operand(static_cast<float>(m[static_cast<size_t>(i * t + j)]), bf16);
    };
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        double o = 0.0, dq = 0.0, dk = 0.0, dv = 0.0;
        for (int64_t j = 0; j < t; ++j) {
          o += r(p, i, j) * x(v, j, c);
          dq += r(ds, i, j) * x(k, j, c);
          dk += r(ds, j, i) * x(q, j, c);
          dv += r(p, j, i) * x(dout, j, c);
        }
        const size_t at = static_cast<size_t>(base + i * d + c);
        e.out[at] = o;
        e.dq[at] = dq;
        e.dk[at] = dk;
        e.dv[at] = dv;
      }
    }
  }
  return e;
}

// Restores the process-wide switches a test changes.
struct SwitchGuard {
  bool native = onednn::native_bf16_enabled();
  ~SwitchGuard() {
    if (onednn::native_bf16_available()) onednn::set_native_bf16_enabled(native);
  }
};

class FusedAttentionTest : public OpTestBase {
 protected:
  struct Result {
    std::vector<float> out, dq, dk, dv;
  };

  // Runs forward and backward on operands of `type`, blocks of block_rows query rows.
  Result run(const Shape3& s, DType type, const std::vector<int32_t>& valid, bool causal,
             int64_t block_rows) {
    const Shape shape{s.bh(), s.t, s.d};
    const auto operand = [&](const std::vector<float>& x) {
      const Tensor f32 = upload(x, shape);
      return type == DType::kBF16 ? cast_to_bf16(f32, *stream_) : f32;
    };
    const Tensor q = operand(q_), k = operand(k_), v = operand(v_), dout = operand(dout_);
    const Tensor key_valid = valid.empty() ? Tensor() : upload_i32(valid, {s.batch, s.t});
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    Tensor out = Tensor::empty(shape, DType::kF32, dev_),
           dq = Tensor::empty(shape, DType::kF32, dev_),
           dk = Tensor::empty(shape, DType::kF32, dev_),
           dv = Tensor::empty(shape, DType::kF32, dev_);
    fused_attention(q, k, v, key_valid, s.heads, causal, scale, out, *stream_, block_rows);
    fused_attention_backward(q, k, v, dout, key_valid, s.heads, causal, scale, dq, dk, dv, *stream_,
                             block_rows);
    return {download(out), download(dq), download(dk), download(dv)};
  }

  void fill(const Shape3& s) {
    q_ = random_vector(static_cast<size_t>(s.numel()), 1, -2.0f, 2.0f);
    k_ = random_vector(static_cast<size_t>(s.numel()), 2, -2.0f, 2.0f);
    v_ = random_vector(static_cast<size_t>(s.numel()), 3);
    dout_ = random_vector(static_cast<size_t>(s.numel()), 4);
  }

  void expect_matches(const Shape3& s, DType type, const std::vector<int32_t>& valid, bool causal,
                      int64_t block_rows) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << s.t << " block_rows " << block_rows << (causal ? " causal" : "")
                 << (valid.empty() ? "" : " padded") << (type == DType::kBF16 ? " bf16" : " f32"));
    fill(s);
    const bool bf16 = type == DType::kBF16;
    const Expected want = reference(s, q_, k_, v_, dout_, valid, causal, bf16);
    const Result got = run(s, type, valid, causal, block_rows);
    // bf16: P and dS are rounded from f32 values that differ from the reference's in the last
    // bits, so an element here and there rounds the other way (one bf16 ulp, 2^-8 relative).
    const double rtol = bf16 ? 2e-2 : 1e-4, atol = bf16 ? 4e-3 : 1e-5;
    EXPECT_TRUE(all_close(got.out, want.out, rtol, atol)) << "out";
    EXPECT_TRUE(all_close(got.dq, want.dq, rtol, atol)) << "dq";
    EXPECT_TRUE(all_close(got.dk, want.dk, rtol, atol)) << "dk";
    EXPECT_TRUE(all_close(got.dv, want.dv, rtol, atol)) << "dv";
  }

  std::vector<float> q_, k_, v_, dout_;
};

TEST_F(FusedAttentionTest, MatchesTheReferenceInF32) {
  const Shape3 s{2, 2, 37, 8};
  for (bool causal : {true, false}) {
    for (int64_t rows : {0, 8, 5, 37, 100}) expect_matches(s, DType::kF32, {}, causal, rows);
  }
}

// Batch 1 has its first two and last keys padded, so its first causal rows see no key at all.
TEST_F(FusedAttentionTest, PaddedKeysAndRowsWithNoKeyInF32) {
  const Shape3 s{2, 3, 20, 4};
  std::vector<int32_t> valid(static_cast<size_t>(s.batch * s.t), 1);
  valid[20] = valid[21] = valid[39] = 0;
  for (bool causal : {true, false}) {
    for (int64_t rows : {0, 6}) expect_matches(s, DType::kF32, valid, causal, rows);
  }
  fill(s);
  const Result got = run(s, DType::kF32, valid, true, 6);
  const int64_t row_of_batch1 = s.heads * s.t * s.d;  // head 0 of batch 1
  for (int64_t c = 0; c < 2 * s.d; ++c) {
    EXPECT_EQ(got.out[static_cast<size_t>(row_of_batch1 + c)], 0.0f) << c;
    EXPECT_EQ(got.dq[static_cast<size_t>(row_of_batch1 + c)], 0.0f) << c;
  }
}

// bf16 on every path this CPU has: the bf16 units (oneDNN) and the emulation in f32.
TEST_F(FusedAttentionTest, MatchesTheReferenceInBf16OnEveryPath) {
  SwitchGuard guard;
  const Shape3 s{1, 2, 70, 16};
  std::vector<int32_t> valid(static_cast<size_t>(s.t), 1);
  valid[69] = 0;
  std::vector<bool> native_modes{false};
  if (onednn::native_bf16_available()) native_modes.push_back(true);
  for (bool native : native_modes) {
    if (onednn::native_bf16_available()) onednn::set_native_bf16_enabled(native);
    SCOPED_TRACE(native ? "bf16 units" : "bf16 emulated");
    expect_matches(s, DType::kBF16, {}, true, 0);
    expect_matches(s, DType::kBF16, valid, true, 16);
    expect_matches(s, DType::kBF16, {}, false, 32);
  }
}

// Each head runs its blocks in order on one thread: a second run gives the same bits.
TEST_F(FusedAttentionTest, RepeatsBitForBit) {
  const Shape3 s{2, 4, 50, 8};
  fill(s);
  for (DType type : {DType::kF32, DType::kBF16}) {
    const Result a = run(s, type, {}, true, 16), b = run(s, type, {}, true, 16);
    EXPECT_TRUE(bitwise_equal(a.out, b.out));
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq));
    EXPECT_TRUE(bitwise_equal(a.dk, b.dk));
    EXPECT_TRUE(bitwise_equal(a.dv, b.dv));
  }
}

TEST_F(FusedAttentionTest, TheHostAndCudaBuildsHaveTheKernels) {
  EXPECT_TRUE(fused_attention_available(DeviceKind::kHost));
  EXPECT_EQ(fused_attention_available(DeviceKind::kCuda), built_with_cuda());
  // The host takes any head dim in f32 and bf16; CUDA bf16 with 16, 32 or 64.
  EXPECT_TRUE(fused_attention_supports(DeviceKind::kHost, 24, Precision::kF32));
  EXPECT_FALSE(fused_attention_supports(DeviceKind::kHost, 16, Precision::kF16));
  EXPECT_EQ(fused_attention_supports(DeviceKind::kCuda, 64, Precision::kBF16), built_with_cuda());
  EXPECT_FALSE(fused_attention_supports(DeviceKind::kCuda, 64, Precision::kF32));
  EXPECT_FALSE(fused_attention_supports(DeviceKind::kCuda, 128, Precision::kBF16));
}

// nn::attention's choice: by length where fusing measured faster, or forced either way; never
// f16 (its products round operands to f16, which the fused kernels do not), never without kernels.
TEST_F(FusedAttentionTest, UseFollowsTheSettingAndTheMeasurements) {
  const FusedAttentionUse was = fused_attention_use();
  const auto host = DeviceKind::kHost;
  set_fused_attention_use(FusedAttentionUse::kWhenFaster);
  EXPECT_FALSE(use_fused_attention(host, 128, 16, Precision::kF32));
  EXPECT_TRUE(use_fused_attention(host, 1024, 16, Precision::kF32));
  EXPECT_EQ(use_fused_attention(host, 300, 16, Precision::kBF16), !onednn::native_bf16_enabled());
  EXPECT_FALSE(use_fused_attention(host, 1024, 16, Precision::kF16));
  set_fused_attention_use(FusedAttentionUse::kAlways);
  EXPECT_TRUE(use_fused_attention(host, 8, 16, Precision::kF32));
  EXPECT_TRUE(use_fused_attention(host, 8, 16, Precision::kBF16));
  EXPECT_FALSE(use_fused_attention(host, 8, 16, Precision::kF16));
  EXPECT_FALSE(use_fused_attention(DeviceKind::kCuda, 1024, 16, Precision::kF32));
  EXPECT_EQ(use_fused_attention(DeviceKind::kCuda, 1024, 64, Precision::kBF16), built_with_cuda());
  set_fused_attention_use(FusedAttentionUse::kWhenFaster);  // CUDA fuses at any length
  EXPECT_EQ(use_fused_attention(DeviceKind::kCuda, 64, 64, Precision::kBF16), built_with_cuda());
  set_fused_attention_use(FusedAttentionUse::kNever);
  EXPECT_FALSE(use_fused_attention(host, 1024, 16, Precision::kF32));
  set_fused_attention_use(was);
}

TEST_F(FusedAttentionTest, BadArgumentsRaiseClearErrors) {
  const Tensor q = upload(random_vector(2 * 6 * 4, 1), {2, 6, 4});
  const Tensor k = upload(random_vector(2 * 6 * 4, 2), {2, 6, 4});
  const Tensor v = upload(random_vector(2 * 6 * 4, 3), {2, 6, 4});
  const Tensor out = Tensor::empty({2, 6, 4}, DType::kF32, dev_);
  const Tensor short_v = upload(random_vector(2 * 5 * 4, 3), {2, 5, 4});
  EXPECT_TRUE(contains(
      error_of([&] { fused_attention(q, k, short_v, Tensor(), 1, true, 0.5f, out, *stream_); }),
      "v is"));
  EXPECT_TRUE(
      contains(error_of([&] { fused_attention(q, k, v, Tensor(), 4, true, 0.5f, out, *stream_); }),
               "does not divide"));
  const Tensor k16 = cast_to_bf16(k, *stream_);
  EXPECT_TRUE(contains(
      error_of([&] { fused_attention(q, k16, v, Tensor(), 1, true, 0.5f, out, *stream_); }), "k"));
  const Tensor bad_valid = upload_i32(std::vector<int32_t>(2 * 5, 1), {2, 5});
  EXPECT_TRUE(
      contains(error_of([&] { fused_attention(q, k, v, bad_valid, 1, true, 0.5f, out, *stream_); }),
               "key_valid is"));
  EXPECT_TRUE(
      contains(error_of([&] { fused_attention(q, k, v, Tensor(), 1, true, 0.5f, q, *stream_); }),
               "overlaps"));
  EXPECT_TRUE(contains(
      error_of([&] { fused_attention(q, k, v, Tensor(), 1, true, 0.5f, out, *stream_, -1); }),
      "block_rows"));
  const Tensor dq = Tensor::empty({2, 6, 4}, DType::kF32, dev_);
  const Tensor dv = Tensor::empty({2, 6, 4}, DType::kF32, dev_);
  EXPECT_TRUE(contains(error_of([&] {
                         fused_attention_backward(q, k, v, out, Tensor(), 1, true, 0.5f, dq, dq, dv,
                                                  *stream_);
                       }),
                       "dq"));
  EXPECT_TRUE(contains(error_of([&] {
                         fused_attention_backward(q, k, v, out, Tensor(), 1, true, 0.5f, dq, out,
                                                  dv, *stream_);
                       }),
                       "overlaps dout"));
}

}  // namespace
}  // namespace ls::test
