// Host kernel of ops/gemm_epilogue.h: the host's bf16 product (GemmOps::gemm_bf16, split over the
// cores) into f32, then one pass over its rows that applies the epilogue and writes D. An f32 D is
// the product's own output, so kBias into f32 is bit for bit the product followed by bias_add; a
// bf16 D needs the f32 product in a scratch tensor first. GELU is ops/host/gelu_tanh.h's, the
// function bias_gelu computes, rounded where cuBLASLt rounds: aux and D each once, from f32.
#include "ops/gemm_epilogue.h"

#include <lockstep/dtype.h>

#include "ops/host/gelu_tanh.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// One row of each epilogue, plain loops in the vector clones (as bias_gelu's rows are), so that
// GELU's exp vectorises; p is the f32 product's row.
LS_VECTOR_CLONES void bias_row(const float* p, const float* bias, float* d, int64_t n) {
  for (int64_t c = 0; c < n; ++c) d[c] = p[c] + bias[c];
}

LS_VECTOR_CLONES void rounded_row(const float* p, const uint16_t* bias16, uint16_t* d, int64_t n) {
  if (bias16 == nullptr) {
    for (int64_t c = 0; c < n; ++c) d[c] = f32_to_bf16(p[c]);
  } else {
    for (int64_t c = 0; c < n; ++c) d[c] = f32_to_bf16(p[c] + bf16_to_f32(bias16[c]));
  }
}

LS_VECTOR_CLONES void bias_gelu_row(const float* p, const uint16_t* bias16, uint16_t* aux,
                                    uint16_t* d, int64_t n) {
  for (int64_t c = 0; c < n; ++c) {
    const float pre = p[c] + bf16_to_f32(bias16[c]);
    aux[c] = f32_to_bf16(pre);
    d[c] = f32_to_bf16(gelu_value(pre));
  }
}

LS_VECTOR_CLONES void dgelu_row(const float* p, const uint16_t* aux, uint16_t* d, int64_t n) {
  for (int64_t c = 0; c < n; ++c) d[c] = f32_to_bf16(p[c] * gelu_grad(bf16_to_f32(aux[c])));
}

void gemm_bf16_epilogue(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                        GemmEpilogue epilogue, const void* bias, uint16_t* aux, void* d,
                        bool d_bf16, Stream& stream) {
  if (m == 0 || n == 0) return;
  const GemmOps* gemm = find_op_table<GemmOps>(DeviceKind::kHost);
  LS_ASSERT(gemm != nullptr && gemm->gemm_bf16 != nullptr, "host GemmOps not registered");
  // The f32 product: D itself when f32, else a scratch tensor the pass below keeps alive.
  Tensor scratch = d_bf16 ? Tensor::empty({m, n}, DType::kF32, stream.device()) : Tensor();
  float* product = d_bf16 ? scratch.f32() : static_cast<float*>(d);
  gemm->gemm_bf16(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, product, n, stream);
  if (epilogue == GemmEpilogue::kNone && !d_bf16) return;

  auto* d32 = static_cast<float*>(d);
  auto* d16 = static_cast<uint16_t*>(d);
  const auto* bias32 = static_cast<const float*>(bias);
  const auto* bias16 = static_cast<const uint16_t*>(bias);
  enqueue_rows(stream, m, n, [=](int64_t r0, int64_t r1) {
    (void)scratch;  // held until this pass has run
    for (int64_t r = r0; r < r1; ++r) {
      const float* p = product + r * n;
      switch (epilogue) {
        case GemmEpilogue::kNone:  // d_bf16 here
          rounded_row(p, nullptr, d16 + r * n, n);
          break;
        case GemmEpilogue::kBias:
          if (d_bf16) {
            rounded_row(p, bias16, d16 + r * n, n);
          } else {
            bias_row(p, bias32, d32 + r * n, n);
          }
          break;
        case GemmEpilogue::kBiasGelu:
          bias_gelu_row(p, bias16, aux + r * n, d16 + r * n, n);
          break;
        case GemmEpilogue::kDGelu:
          dgelu_row(p, aux + r * n, d16 + r * n, n);
          break;
      }
    }
  });
}

const GemmEpilogueOps kHostGemmEpilogue{.gemm_bf16_epilogue = gemm_bf16_epilogue};
LS_REGISTER_OP_TABLE(GemmEpilogueOps, DeviceKind::kHost, kHostGemmEpilogue);

}  // namespace
}  // namespace ls
