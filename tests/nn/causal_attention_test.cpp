// nn::attention, fused and unfused, at sequence lengths whose causal products split into several
// key blocks (unfused, ops/causal_gemm.h, host: f32 T = 72 is blocks of 64 and 8, T = 256 four
// blocks of 64; bf16 T = 300 four blocks of 75, or five (64 x 4 and 44) where bf16 runs on AMX
// tiles; fused, ops/host/fused_attention.cpp: T = 72 one block of query rows, T = 256 two of 128,
// T = 300 five, the last of 44): the output
// and d(qkv) against a double-precision reference of the same attention, causal or not, with
// padding keys, in f32 and bf16 (bf16: every product operand rounded, as the op does).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <lockstep/lockstep.h>
#include "engine/core/runtime.h"
#include "ops/attention.h"
#include "ops/causal_gemm.h"

namespace {

using ls::Tape;
using ls::Var;

struct Case {
  int64_t batch, seq, heads, head_dim;
  bool causal;
  bool padded;  // the last sequence's final 5 keys are padding
};

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// What bf16 rounding does to an operand (lockstep/dtype.h's conversion, the ops' own).
double rounded(float x, bool bf16) { return bf16 ? ls::bf16_to_f32(ls::f32_to_bf16(x)) : x; }

struct Reference {
  std::vector<double> out, dqkv;
};

// The attention of ops/attention.h and nn::attention in double: P = softmax(scale q k^T) over
// the visible keys, out = P v; backward dP = dy v^T, dS = scale P (dP - rowsum(dP P)),
// dq = dS k, dk = dS^T q, dv = P^T dy. In bf16 the six products read rounded operands (q, k,
// v, P, dy, dS), the rest stays in full precision.
Reference reference(const Case& c, const std::vector<float>& qkv, const std::vector<float>& dy,
                    const std::vector<int32_t>& valid, bool bf16) {
  const int64_t t = c.seq, d = c.head_dim, width = 3 * c.heads * d, cw = c.heads * d;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Reference r{std::vector<double>(static_cast<size_t>(c.batch * t * cw)),
              std::vector<double>(qkv.size())};
  const auto at = [&](int64_t b, int64_t i, int64_t g, int64_t h, int64_t e) {
    return static_cast<size_t>((b * t + i) * width + g * cw + h * d + e);
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      std::vector<double> p(static_cast<size_t>(t * t), 0.0), ds(p.size(), 0.0);
      const auto x = [&](int64_t g, int64_t i, int64_t e) {
        return rounded(qkv[at(b, i, g, h, e)], bf16);
      };
      for (int64_t i = 0; i < t; ++i) {
        double max = -1e300;
        std::vector<bool> seen(static_cast<size_t>(t), false);
        for (int64_t j = 0; j < t; ++j) {
          seen[j] = (!c.causal || j <= i) && valid[static_cast<size_t>(b * t + j)] != 0;
          if (!seen[j]) continue;
          double s = 0.0;
          for (int64_t e = 0; e < d; ++e) s += x(0, i, e) * x(1, j, e);
          p[static_cast<size_t>(i * t + j)] = scale * s;
          max = std::max(max, scale * s);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < t; ++j) {
          double& v = p[static_cast<size_t>(i * t + j)];
          v = seen[j] ? std::exp(v - max) : 0.0;
          sum += v;
        }
        for (int64_t j = 0; j < t; ++j) p[static_cast<size_t>(i * t + j)] /= sum;
      }
      const auto pr = [&](int64_t i, int64_t j) {
        return rounded(static_cast<float>(p[static_cast<size_t>(i * t + j)]), bf16);
      };
      const auto g_out = [&](int64_t i, int64_t e) {
        return rounded(dy[static_cast<size_t>((b * t + i) * cw + h * d + e)], bf16);
      };
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t e = 0; e < d; ++e) {
          double o = 0.0;
          for (int64_t j = 0; j < t; ++j) o += pr(i, j) * x(2, j, e);
          r.out[static_cast<size_t>((b * t + i) * cw + h * d + e)] = o;
        }
        double dot = 0.0;
        std::vector<double> dp(static_cast<size_t>(t));
        for (int64_t j = 0; j < t; ++j) {
          for (int64_t e = 0; e < d; ++e) dp[j] += g_out(i, e) * x(2, j, e);
          dot += dp[j] * p[static_cast<size_t>(i * t + j)];
        }
        for (int64_t j = 0; j < t; ++j) {
          ds[static_cast<size_t>(i * t + j)] =
              scale * p[static_cast<size_t>(i * t + j)] * (dp[j] - dot);
        }
      }
      const auto dsr = [&](int64_t i, int64_t j) {
        return rounded(static_cast<float>(ds[static_cast<size_t>(i * t + j)]), bf16);
      };
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t e = 0; e < d; ++e) {
          double dq = 0.0, dk = 0.0, dv = 0.0;
          for (int64_t j = 0; j < t; ++j) {
            dq += dsr(i, j) * x(1, j, e);
            dk += dsr(j, i) * x(0, j, e);
            dv += pr(j, i) * g_out(j, e);
          }
          r.dqkv[at(b, i, 0, h, e)] = dq;
          r.dqkv[at(b, i, 1, h, e)] = dk;
          r.dqkv[at(b, i, 2, h, e)] = dv;
        }
      }
    }
  }
  return r;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])))) {
      if (++bad <= 5)
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements off by more than " << tol;
}

void check_path(const Case& c, ls::Precision precision) {
  const ls::Device host{ls::DeviceKind::kHost, 0};
  auto stream = ls::device_runtime(host).create_stream();
  const int64_t rows = c.batch * c.seq, cw = c.heads * c.head_dim;
  const std::vector<float> qkv = uniform(static_cast<size_t>(rows * 3 * cw), 5);
  const std::vector<float> dy = uniform(static_cast<size_t>(rows * cw), 6);
  std::vector<int32_t> valid(static_cast<size_t>(rows), 1);
  if (c.padded) std::fill(valid.end() - 5, valid.end(), 0);

  Tape tape(*stream);
  ls::ForwardContext context;
  context.precision = precision;
  tape.set_context(context);
  Var x = tape.differentiable_input(ls::Tensor::from_host(qkv, {rows, 3 * cw}, host, *stream));
  const ls::Tensor key_valid =
      c.padded ? ls::Tensor::from_host_i32(valid, {c.batch, c.seq}, host, *stream) : ls::Tensor();
  Var y = ls::nn::attention(tape, x, key_valid, {c.batch, c.seq, c.heads, c.causal}, 0.0f, 0);
  tape.backward(y, ls::Tensor::from_host(dy, {rows, cw}, host, *stream));

  const bool bf16 = precision == ls::Precision::kBF16;
  const Reference want = reference(c, qkv, dy, valid, bf16);
  const double tol =
      bf16 ? 2e-3 : 2e-5;  // bf16: P and dS round differently by an ulp here and there
  expect_close(y->value.to_host_f32(*stream), want.out, tol, "out");
  expect_close(x->grad.to_host_f32(*stream), want.dqkv, tol, "d(qkv)");
}

// Both ways nn::attention computes on the host: fused and the unfused products.
void check(const Case& c, ls::Precision precision) {
  const ls::FusedAttentionUse was = ls::fused_attention_use();
  for (auto use : {ls::FusedAttentionUse::kAlways, ls::FusedAttentionUse::kNever}) {
    SCOPED_TRACE(use == ls::FusedAttentionUse::kAlways ? "fused attention" : "unfused attention");
    ls::set_fused_attention_use(use);
    check_path(c, precision);
  }
  ls::set_fused_attention_use(was);
}

// The policy of ops/causal_gemm.h. bf16 on the host depends on the CPU (AMX tiles or not).
TEST(CausalAttention, SplitsIntoBlocksAtTheseLengths) {
  using ls::DeviceKind;
  using ls::Precision;
  EXPECT_EQ(ls::causal_block_rows(72, Precision::kF32, DeviceKind::kHost), 64);  // 64 and 8
  EXPECT_EQ(ls::causal_block_rows(128, Precision::kF32, DeviceKind::kHost), 64);
  EXPECT_EQ(ls::causal_block_rows(1024, Precision::kF32, DeviceKind::kHost), 128);
  EXPECT_GE(ls::causal_block_rows(16, Precision::kF32, DeviceKind::kHost), 16);  // one block
  const bool amx = ls::onednn::bf16_on_amx();
  EXPECT_EQ(ls::causal_block_rows(128, Precision::kBF16, DeviceKind::kHost), amx ? 128 : 64);
  EXPECT_EQ(ls::causal_block_rows(1024, Precision::kBF16, DeviceKind::kHost), amx ? 64 : 128);
  EXPECT_EQ(ls::causal_block_rows(72, Precision::kF32, DeviceKind::kCuda), 32);  // 32, 32, 8
  EXPECT_EQ(ls::causal_block_rows(1024, Precision::kBF16, DeviceKind::kCuda), 128);
}

TEST(CausalAttention, UnevenBlocksMatchTheReferenceInF32) {
  check({2, 72, 2, 8, true, false}, ls::Precision::kF32);
}

TEST(CausalAttention, FourBlocksWithPaddingMatchTheReferenceInF32) {
  check({2, 256, 2, 4, true, true}, ls::Precision::kF32);
}

TEST(CausalAttention, BlocksMatchTheReferenceInBf16) {
  check({2, 300, 2, 8, true, true}, ls::Precision::kBF16);
}

TEST(CausalAttention, UnmaskedAttentionStillTakesTheFullProducts) {
  check({2, 72, 2, 8, false, true}, ls::Precision::kF32);
  check({1, 40, 1, 8, false, false}, ls::Precision::kBF16);
}

}  // namespace
