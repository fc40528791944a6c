// CUDA fused attention (ops/cuda/fused_attention.cu) against the host's fused kernels, which the
// host's unfused path checks (tests/ops/fused_attention_test.cpp): bf16 operands at head dims 16
// and 64, causal or not, with padded keys, sequences that end inside a tile, a row that sees no
// key; two runs bitwise equal. The two backends round P to bf16 at different points (online
// softmax on CUDA: exp(s - running max) before the division by the sum; the host: the normalised
// probability), so they agree within bf16 rounding, not bitwise. Runs on a GPU and under the CPU
// emulator (LOCKSTEP_CUDA=EMULATED), where it is how these kernels are tested in CI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention.h"
#include "ops/elementwise.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class CudaFusedAttentionTest : public CudaVsHostTest {
 protected:
  struct Case {
    int64_t batch, heads, t, d;
    bool causal, padded;
  };
  struct Outputs {
    Pair out, dq, dk, dv;
  };

  // q, k, v, dout as bf16 on both backends, the same values.
  Pair bf16_operand(int64_t bh, int64_t t, int64_t d, uint32_t seed) {
    return bf16(random_vector(bh * t * d, seed), {bh, t, d});
  }

  Outputs run(const Case& c) {
    const int64_t bh = c.batch * c.heads;
    const Pair q = bf16_operand(bh, c.t, c.d, 1), k = bf16_operand(bh, c.t, c.d, 2);
    const Pair v = bf16_operand(bh, c.t, c.d, 3), dout = bf16_operand(bh, c.t, c.d, 4);
    Pair valid;
    if (c.padded) {
      // The last batch row's final third of keys is padding.
      std::vector<int32_t> mask(static_cast<size_t>(c.batch * c.t), 1);
      for (int64_t j = c.t - c.t / 3; j < c.t; ++j) {
        mask[static_cast<size_t>((c.batch - 1) * c.t + j)] = 0;
      }
      mask[0] = 0;  // batch 0, key 0: under causal, query 0 of batch 0 sees no key at all
      valid = upload_i32(mask, {c.batch, c.t});
    }
    Outputs o{empty({bh, c.t, c.d}), empty({bh, c.t, c.d}), empty({bh, c.t, c.d}),
              empty({bh, c.t, c.d})};
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    run_both([&](Stream& s, auto side) {
      const Tensor mask = c.padded ? side(valid) : Tensor();
      fused_attention(side(q), side(k), side(v), mask, c.heads, c.causal, scale, side(o.out), s);
      fused_attention_backward(side(q), side(k), side(v), side(dout), mask, c.heads, c.causal,
                               scale, side(o.dq), side(o.dk), side(o.dv), s);
    });
    return o;
  }

  // Every element within bf16 rounding of the host's: |cuda - host| <= 0.02 (1 + max |host|).
  void expect_close_bf16(const Pair& p, const char* what) {
    const std::vector<float> host = host_values(p), cuda = cuda_values(p);
    float largest = 0, worst = 0;
    for (size_t i = 0; i < host.size(); ++i) {
      largest = std::max(largest, std::abs(host[i]));
      worst = std::max(worst, std::abs(host[i] - cuda[i]));
      ASSERT_TRUE(std::isfinite(cuda[i])) << what << "[" << i << "]";
    }
    EXPECT_LE(worst, 0.02f * (1.0f + largest)) << what << ": largest |host| " << largest;
  }
};

TEST_F(CudaFusedAttentionTest, MatchesTheHostsFusedKernels) {
  for (const Case& c : {Case{2, 2, 40, 16, true, false}, Case{2, 2, 40, 16, false, true},
                        Case{1, 2, 80, 64, true, true}, Case{1, 1, 70, 64, false, false}}) {
    SCOPED_TRACE(testing::Message() << "t=" << c.t << " d=" << c.d << " causal=" << c.causal
                                    << " padded=" << c.padded);
    const Outputs o = run(c);
    expect_close_bf16(o.out, "out");
    expect_close_bf16(o.dq, "dq");
    expect_close_bf16(o.dk, "dk");
    expect_close_bf16(o.dv, "dv");
  }
}

TEST_F(CudaFusedAttentionTest, ARowThatSeesNoKeyIsZeroWithZeroGradients) {
  const Outputs o = run(Case{2, 2, 40, 16, true, true});
  const std::vector<float> out = cuda_values(o.out), dq = cuda_values(o.dq);
  for (int64_t head = 0; head < 2; ++head) {  // batch 0, query 0 of each head
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(out[static_cast<size_t>(head * 40 * 16 + c)], 0.0f);
      EXPECT_EQ(dq[static_cast<size_t>(head * 40 * 16 + c)], 0.0f);
    }
  }
}

TEST_F(CudaFusedAttentionTest, RepeatsBitwise) {
  const Case c{1, 2, 80, 64, true, true};
  const Outputs a = run(c), b = run(c);
  EXPECT_TRUE(bitwise_equal(cuda_values(a.out), cuda_values(b.out)));
  EXPECT_TRUE(bitwise_equal(cuda_values(a.dq), cuda_values(b.dq)));
  EXPECT_TRUE(bitwise_equal(cuda_values(a.dk), cuda_values(b.dk)));
  EXPECT_TRUE(bitwise_equal(cuda_values(a.dv), cuda_values(b.dv)));
}

// packed_attention reads the qkv projection in place and writes token-major: bit for bit what
// split_heads_bf16, the head-major kernels and merge_heads give (the same bf16 roundings, the
// same kernels), backward included, and its accumulate adds to the gradient there; a bf16 dqkv is
// the f32 one rounded.
TEST_F(CudaFusedAttentionTest, PackedIsTheHeadMajorPathBitForBit) {
  const int64_t b = 2, h = 2, t = 40, d = 16, c = h * d, bh = b * h;
  const float scale = 0.25f;
  Stream& s = *cuda_;
  const Tensor qkv = upload(random_vector(b * t * 3 * c, 11), {b * t, 3 * c}).cuda;
  const Tensor dout = upload(random_vector(b * t * c, 12), {b * t, c}).cuda;
  std::vector<int32_t> mask(static_cast<size_t>(b * t), 1);
  for (int64_t j = 30; j < t; ++j) mask[static_cast<size_t>(t + j)] = 0;
  const Tensor valid = upload_i32(mask, {b, t}).cuda;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    // Head-major: the copies, the kernels, the copies back.
    const Tensor heads = Tensor::empty({3, b, h, t, d}, DType::kBF16, kCuda0);
    split_heads_bf16(qkv, heads, {b, t, 3, h, d}, s);
    const auto group = [&](const Tensor& x, int64_t g) { return x.view(g * bh * t * d, {bh, t, d}); };
    const Tensor context = Tensor::empty({bh, t, d}, DType::kF32, kCuda0);
    fused_attention(group(heads, 0), group(heads, 1), group(heads, 2), valid, h, causal, scale,
                    context, s);
    const Tensor y_ref = Tensor::empty({b * t, c}, DType::kF32, kCuda0);
    merge_heads(context, y_ref, {b, t, 1, h, d}, false, s);
    const Tensor dcontext = Tensor::empty({1, b, h, t, d}, DType::kBF16, kCuda0);
    split_heads_bf16(dout, dcontext, {b, t, 1, h, d}, s);
    const Tensor dheads = Tensor::empty({3, b, h, t, d}, DType::kF32, kCuda0);
    fused_attention_backward(group(heads, 0), group(heads, 1), group(heads, 2), group(dcontext, 0),
                             valid, h, causal, scale, group(dheads, 0), group(dheads, 1),
                             group(dheads, 2), s);
    const Tensor dqkv_ref = Tensor::empty({b * t, 3 * c}, DType::kF32, kCuda0);
    merge_heads(dheads, dqkv_ref, {b, t, 3, h, d}, false, s);
    // Packed.
    const Tensor y = Tensor::empty({b * t, c}, DType::kF32, kCuda0);
    const Tensor y16 = Tensor::empty({b * t, c}, DType::kBF16, kCuda0);
    packed_attention(qkv, valid, b, h, causal, scale, y, s, y16);
    const Tensor widened = Tensor::empty({b * t, c}, DType::kF32, kCuda0);
    const Tensor rounded = Tensor::empty({b * t, c}, DType::kF32, kCuda0);
    cast(y16, widened, s);
    cast(cast_to_bf16(y, s), rounded, s);
    EXPECT_TRUE(bitwise_equal(widened.to_host_f32(s), rounded.to_host_f32(s)));
    const Tensor dqkv = Tensor::empty({b * t, 3 * c}, DType::kF32, kCuda0);
    packed_attention_backward(qkv, dout, valid, b, h, causal, scale, dqkv, false, s);
    EXPECT_TRUE(bitwise_equal(y.to_host_f32(s), y_ref.to_host_f32(s)));
    const std::vector<float> grads = dqkv.to_host_f32(s);
    EXPECT_TRUE(bitwise_equal(grads, dqkv_ref.to_host_f32(s)));
    // A bf16 dqkv: the f32 one rounded, bit for bit; it cannot be accumulated into.
    const Tensor dqkv16 = Tensor::empty({b * t, 3 * c}, DType::kBF16, kCuda0);
    packed_attention_backward(qkv, dout, valid, b, h, causal, scale, dqkv16, false, s);
    const Tensor dqkv16_wide = Tensor::empty({b * t, 3 * c}, DType::kF32, kCuda0);
    const Tensor dqkv_rounded = Tensor::empty({b * t, 3 * c}, DType::kF32, kCuda0);
    cast(dqkv16, dqkv16_wide, s);
    cast(cast_to_bf16(dqkv, s), dqkv_rounded, s);
    EXPECT_TRUE(bitwise_equal(dqkv16_wide.to_host_f32(s), dqkv_rounded.to_host_f32(s)));
    EXPECT_THROW(packed_attention_backward(qkv, dout, valid, b, h, causal, scale, dqkv16, true, s),
                 Error);
    // accumulate: added to what is there.
    const Tensor ones = upload(std::vector<float>(static_cast<size_t>(b * t * 3 * c), 1.0f),
                               {b * t, 3 * c}).cuda;
    packed_attention_backward(qkv, dout, valid, b, h, causal, scale, ones, true, s);
    std::vector<float> expected = grads;
    for (float& g : expected) g += 1.0f;
    EXPECT_TRUE(bitwise_equal(ones.to_host_f32(s), expected));
  }
}

TEST_F(CudaFusedAttentionTest, DeclinesWhatItHasNoKernelFor) {
  EXPECT_FALSE(fused_attention_supports(DeviceKind::kCuda, 128, Precision::kBF16));
  EXPECT_FALSE(fused_attention_supports(DeviceKind::kCuda, 64, Precision::kF32));
  Pair q = upload(random_vector(2 * 16 * 64, 1), {2, 16, 64});
  Pair out = empty({2, 16, 64});
  EXPECT_THROW(fused_attention(q.cuda, q.cuda, q.cuda, Tensor(), 1, true, 0.125f, out.cuda, *cuda_),
               Error);
}

}  // namespace
}  // namespace ls::test
