// matmul_bf16_epilogue on the host (ops/host/gemm_epilogue.cpp) against the separate ops it
// replaces, bit for bit: the product (matmul_bf16), bias_add, bias_gelu (tanh form), gelu_backward
// and the casts to bf16. Every epilogue, both output types, transposed operands; the checks that
// reject bad arguments; the one launch the ledger records. The CUDA kernel (cuBLASLt) is checked
// against this one in tests/ops/cuda_gemm_epilogue_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/bias.h"
#include "ops/elementwise.h"
#include "ops/gemm_epilogue.h"
#include "ops/op_ledger.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

// Runs `call`, which must throw an ls::Error whose message contains `needle`.
template <typename Call>
void expect_error_contains(Call call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing \"" << needle << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

class GemmEpilogueTest : public OpTestBase {
 protected:
  static constexpr int64_t kM = 9, kN = 24, kK = 13;

  Tensor bf16(const std::vector<float>& values, const Shape& shape) {
    return cast_to_bf16(upload(values, shape), *stream_);
  }
  Tensor widened(const Tensor& t16) {
    Tensor out = Tensor::empty(t16.shape(), DType::kF32, dev_);
    cast(t16, out, *stream_);
    return out;
  }
  void expect_same(const Tensor& a, const Tensor& b) {
    const Tensor wa = a.dtype() == DType::kBF16 ? widened(a) : a;
    const Tensor wb = b.dtype() == DType::kBF16 ? widened(b) : b;
    EXPECT_TRUE(bitwise_equal(download(wa), download(wb)));
  }

  // op(A) [kM, kK] and op(B) [kK, kN], stored as the flags say.
  Tensor a_for(bool trans) {
    return bf16(random_vector(kM * kK, 1, -2, 2), trans ? Shape{kK, kM} : Shape{kM, kK});
  }
  Tensor b_for(bool trans) {
    return bf16(random_vector(kK * kN, 2, -2, 2), trans ? Shape{kN, kK} : Shape{kK, kN});
  }
  Tensor product(const Tensor& a, bool ta, const Tensor& b, bool tb) {
    Tensor p = Tensor::empty({kM, kN}, DType::kF32, dev_);
    matmul_bf16(a, ta, b, tb, p, 1.0f, 0.0f, *stream_);
    return p;
  }
};

TEST_F(GemmEpilogueTest, NoneAndBiasAreTheProductAndBiasAdd) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = a_for(ta), b = b_for(tb);
      const Tensor expected = product(a, ta, b, tb);
      Tensor d = Tensor::empty({kM, kN}, DType::kF32, dev_);
      matmul_bf16_epilogue(a, ta, b, tb, GemmEpilogue::kNone, Tensor(), Tensor(), d, *stream_);
      expect_same(d, expected);
      Tensor d16 = Tensor::empty({kM, kN}, DType::kBF16, dev_);
      matmul_bf16_epilogue(a, ta, b, tb, GemmEpilogue::kNone, Tensor(), Tensor(), d16, *stream_);
      expect_same(d16, cast_to_bf16(expected, *stream_));

      const Tensor bias = upload(random_vector(kN, 3), {kN});
      matmul_bf16_epilogue(a, ta, b, tb, GemmEpilogue::kBias, bias, Tensor(), d, *stream_);
      bias_add(expected, bias, *stream_);
      expect_same(d, expected);
    }
  }
}

TEST_F(GemmEpilogueTest, Bf16BiasIntoBf16IsTheRoundedSum) {
  const Tensor a = a_for(false), b = b_for(true);
  const Tensor bias16 = bf16(random_vector(kN, 4), {kN});
  Tensor d16 = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  matmul_bf16_epilogue(a, false, b, true, GemmEpilogue::kBias, bias16, Tensor(), d16, *stream_);
  const Tensor expected = product(a, false, b, true);
  bias_add(expected, widened(bias16), *stream_);
  expect_same(d16, cast_to_bf16(expected, *stream_));
}

TEST_F(GemmEpilogueTest, BiasGeluIsBiasGeluWithThePreActivationKept) {
  const Tensor a = a_for(false), b = b_for(true);
  const Tensor bias16 = bf16(random_vector(kN, 5), {kN});
  Tensor d16 = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  Tensor aux = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  matmul_bf16_epilogue(a, false, b, true, GemmEpilogue::kBiasGelu, bias16, aux, d16, *stream_);

  const Tensor p = product(a, false, b, true);
  Tensor y = Tensor::empty({kM, kN}, DType::kF32, dev_);
  bias_gelu(p, widened(bias16), y, /*erf=*/false, *stream_);
  expect_same(d16, cast_to_bf16(y, *stream_));
  bias_add(p, widened(bias16), *stream_);
  expect_same(aux, cast_to_bf16(p, *stream_));
}

TEST_F(GemmEpilogueTest, DGeluIsTheProductTimesGeluGradientAtAux) {
  const Tensor a = a_for(false), b = b_for(false);
  const Tensor aux = bf16(random_vector(kM * kN, 6, -4, 4), {kM, kN});
  Tensor d16 = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  matmul_bf16_epilogue(a, false, b, false, GemmEpilogue::kDGelu, Tensor(), aux, d16, *stream_);

  const Tensor p = product(a, false, b, false);
  Tensor dx = Tensor::empty({kM, kN}, DType::kF32, dev_);
  gelu_backward(widened(aux), p, dx, /*accumulate=*/false, *stream_);
  expect_same(d16, cast_to_bf16(dx, *stream_));
}

TEST_F(GemmEpilogueTest, BadArgumentsAreRejected) {
  const Tensor a = a_for(false), b = b_for(true);
  const Tensor d16 = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  const Tensor d32 = Tensor::empty({kM, kN}, DType::kF32, dev_);
  const Tensor aux = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  const Tensor bias32 = upload(random_vector(kN, 7), {kN});
  const Tensor bias16 = cast_to_bf16(bias32, *stream_);
  const auto call = [&](GemmEpilogue e, const Tensor& bias, const Tensor& x, const Tensor& d) {
    matmul_bf16_epilogue(a, false, b, true, e, bias, x, d, *stream_);
  };
  expect_error_contains([&] { call(GemmEpilogue::kBias, bias32, Tensor(), d16); }, "bias");
  expect_error_contains([&] { call(GemmEpilogue::kBias, Tensor(), Tensor(), d32); }, "bias");
  expect_error_contains([&] { call(GemmEpilogue::kNone, bias32, Tensor(), d32); }, "takes no bias");
  expect_error_contains([&] { call(GemmEpilogue::kBiasGelu, bias32, aux, d32); }, "bf16 d");
  expect_error_contains([&] { call(GemmEpilogue::kDGelu, Tensor(), Tensor(), d16); }, "aux");
  expect_error_contains([&] { call(GemmEpilogue::kNone, Tensor(), aux, d16); }, "takes no aux");
  expect_error_contains(
      [&] {
        call(GemmEpilogue::kDGelu, Tensor(), Tensor::empty({kM, 8}, DType::kBF16, dev_), d16);
      },
      "expected d's shape");
  // n not a multiple of 8: cuBLASLt's aux leading dimension.
  const Tensor b_odd = bf16(random_vector(kK * 12, 8), {12, kK});
  expect_error_contains(
      [&] {
        matmul_bf16_epilogue(a, false, b_odd, true, GemmEpilogue::kDGelu, Tensor(),
                             Tensor::empty({kM, 12}, DType::kBF16, dev_),
                             Tensor::empty({kM, 12}, DType::kBF16, dev_), *stream_);
      },
      "multiple of 8");
  expect_error_contains(
      [&] {
        matmul_bf16_epilogue(upload(random_vector(kM * kK, 9), {kM, kK}), false, b, true,
                             GemmEpilogue::kNone, Tensor(), Tensor(), d32, *stream_);
      },
      "bf16");
  expect_error_contains(
      [&] {
        matmul_bf16_epilogue(a, false, b, false, GemmEpilogue::kNone, Tensor(), Tensor(), d32,
                             *stream_);
      },
      "inner dimensions differ");
  (void)bias16;
}

TEST_F(GemmEpilogueTest, TheLedgerSeesOneCublasLtMatmul) {
  const Tensor a = a_for(false), b = b_for(true);
  const Tensor bias16 = bf16(random_vector(kN, 10), {kN});
  Tensor d16 = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  Tensor aux = Tensor::empty({kM, kN}, DType::kBF16, dev_);
  OpLedger ledger(OpLedger::Options{});
  matmul_bf16_epilogue(a, false, b, true, GemmEpilogue::kBiasGelu, bias16, aux, d16, *stream_);
  const std::vector<LedgerRow> rows = ledger.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].launch.kernel, "cublasLtMatmul");
  EXPECT_EQ(rows[0].launch.rate, LaunchRate::kTensorCore);
  EXPECT_DOUBLE_EQ(rows[0].launch.flops, 2.0 * kM * kN * kK);
  // A and B in bf16, D and aux in bf16, the bf16 bias: each element once.
  EXPECT_DOUBLE_EQ(rows[0].launch.bytes, 2.0 * (kM * kK + kK * kN + 2 * kM * kN + kN));
  EXPECT_NE(rows[0].launch.shape.find("bias+gelu"), std::string::npos);
}

}  // namespace
}  // namespace ls::test
