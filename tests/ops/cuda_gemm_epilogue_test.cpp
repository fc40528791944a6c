// matmul_bf16_epilogue on CUDA (ops/cuda/gemm_lt.cu, cuBLASLt) against the host kernel, which
// tests/ops/gemm_epilogue_test.cpp checks bit for bit against the separate ops. Every epilogue,
// f32 and bf16 outputs, transposed operands, a second call of a planned shape (the plan is kept:
// bitwise the first). The backends sum the product in different orders and compute GELU with
// different tanh/exp, so bf16 outputs agree within a bf16 rounding step. Runs on a GPU and under
// the CPU emulator (LOCKSTEP_CUDA=EMULATED), whose cuBLASLt computes what cuBLASLt documents.
#include <gtest/gtest.h>

#include <vector>

#include "ops/elementwise.h"
#include "ops/gemm_epilogue.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class CudaGemmEpilogueTest : public CudaVsHostTest {
 protected:
  static constexpr int64_t kM = 37, kN = 48, kK = 40;
  // One bf16 step (2^-8 relative) plus the f32 product's order.
  static constexpr double kRtol = 1.0 / 128, kAtol = 1e-3;

  void check(GemmEpilogue epilogue, bool trans_a, bool trans_b, DType d_type) {
    SCOPED_TRACE(testing::Message() << gemm_epilogue_name(epilogue) << " trans_a=" << trans_a
                                    << " trans_b=" << trans_b << " d " << dtype_name(d_type));
    const Pair a = bf16(random_vector(kM * kK, 1, -2, 2), trans_a ? Shape{kK, kM} : Shape{kM, kK});
    const Pair b = bf16(random_vector(kK * kN, 2, -2, 2), trans_b ? Shape{kN, kK} : Shape{kK, kN});
    Pair bias;
    if (epilogue == GemmEpilogue::kBias || epilogue == GemmEpilogue::kBiasGelu) {
      bias = d_type == DType::kBF16 ? bf16(random_vector(kN, 3), {kN})
                                    : upload(random_vector(kN, 3), {kN});
    }
    Pair aux;
    if (epilogue == GemmEpilogue::kDGelu) aux = bf16(random_vector(kM * kN, 4, -4, 4), {kM, kN});
    if (epilogue == GemmEpilogue::kBiasGelu) aux = empty({kM, kN}, DType::kBF16);
    const Pair d = empty({kM, kN}, d_type), again = empty({kM, kN}, d_type);
    run_both([&](Stream& s, auto side) {
      const Tensor bias_t = bias.host.defined() ? side(bias) : Tensor();
      const Tensor aux_t = aux.host.defined() ? side(aux) : Tensor();
      matmul_bf16_epilogue(side(a), trans_a, side(b), trans_b, epilogue, bias_t, aux_t, side(d), s);
      if (epilogue != GemmEpilogue::kBiasGelu) {  // kBiasGelu writes aux: compare it first
        matmul_bf16_epilogue(side(a), trans_a, side(b), trans_b, epilogue, bias_t, aux_t,
                             side(again), s);
      }
    });
    expect_close(f32_of(d), d_type == DType::kBF16 ? kRtol : 1e-5,
                 d_type == DType::kBF16 ? kAtol : 1e-5);
    if (epilogue == GemmEpilogue::kBiasGelu) {
      expect_close(f32_of(aux), kRtol, kAtol);
    } else {
      EXPECT_TRUE(bitwise_equal(cuda_values(f32_of(d)), cuda_values(f32_of(again))));
    }
  }
};

TEST_F(CudaGemmEpilogueTest, NoneAndBiasMatchTheHost) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (DType d : {DType::kF32, DType::kBF16}) {
        check(GemmEpilogue::kNone, ta, tb, d);
        check(GemmEpilogue::kBias, ta, tb, d);
      }
    }
  }
}

TEST_F(CudaGemmEpilogueTest, BiasGeluMatchesTheHost) {
  check(GemmEpilogue::kBiasGelu, false, true, DType::kBF16);
  check(GemmEpilogue::kBiasGelu, true, false, DType::kBF16);
}

TEST_F(CudaGemmEpilogueTest, DGeluMatchesTheHost) {
  check(GemmEpilogue::kDGelu, false, false, DType::kBF16);
  check(GemmEpilogue::kDGelu, true, true, DType::kBF16);
}

}  // namespace
}  // namespace ls::test
