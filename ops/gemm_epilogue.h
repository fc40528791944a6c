// A bf16 matrix product with the elementwise step that follows it done on the product's way out
// (cuBLASLt's epilogues). Kernels: ops/host/gemm_epilogue.cpp, ops/cuda/gemm_lt.cu (cuBLASLt).
//
// matmul_bf16_epilogue: D[m, n] = epilogue(op(A) op(B)), row-major, A and B bf16 2-D tensors,
// the product accumulated in f32 and D written once, in f32 or bf16 (D's dtype). The epilogues:
//   kNone       D = P                                   (P = op(A) op(B), f32)
//   kBias       D = P + bias[c]                         bias of D's dtype, [n]
//   kBiasGelu   pre = P + bias[c] (bias bf16, D bf16); aux = bf16(pre); D = gelu_tanh(pre)
//   kDGelu      D = P * gelu_tanh'(aux) (aux bf16 [m, n], the kBiasGelu aux of forward; D bf16)
// gelu_tanh is GELU's tanh form, the only one cuBLASLt's epilogues compute: 0.5 x (1 + tanh(
// sqrt(2/pi) (x + 0.044715 x^3))). kBiasGelu's D and aux take f32 `pre` each rounded once; kDGelu
// reads aux as stored. A bf16 bias with a bf16 D is what PyTorch's autocast multiplies too (it
// casts a Linear's bias with its weight); an f32 D takes the f32 bias, so kBias into f32 is exactly
// the product plus bias_add (ops/bias.h).
// Where the epilogue needs one, n must be a multiple of 8 (cuBLASLt's rule for the aux matrix's
// leading dimension). Asynchronous in stream order; every tensor on the stream's device; D must
// not overlap an input. Bad arguments raise ls::Error at the call.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include <lockstep/error.h>
#include "ops/gemm.h"
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

enum class GemmEpilogue : uint8_t { kNone, kBias, kBiasGelu, kDGelu };

struct GemmEpilogueOps {
  // D = epilogue(op(A) op(B)) as above; d_bf16 says D's (and a kBias bias's) type; ldd = n.
  // bias: float* or uint16_t* (bf16 bits) by D's type; aux: bf16 bits, [m, n], ld n.
  void (*gemm_bf16_epilogue)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                             GemmEpilogue epilogue, const void* bias, uint16_t* aux, void* d,
                             bool d_bf16, Stream& stream) = nullptr;
};

inline const char* gemm_epilogue_name(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone:
      return "none";
    case GemmEpilogue::kBias:
      return "bias";
    case GemmEpilogue::kBiasGelu:
      return "bias+gelu";
    case GemmEpilogue::kDGelu:
      return "dgelu";
  }
  return "?";
}

namespace detail {
inline bool epilogue_has_bias(GemmEpilogue e) {
  return e == GemmEpilogue::kBias || e == GemmEpilogue::kBiasGelu;
}
inline bool epilogue_has_aux(GemmEpilogue e) {
  return e == GemmEpilogue::kBiasGelu || e == GemmEpilogue::kDGelu;
}
}  // namespace detail

inline void matmul_bf16_epilogue(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                 GemmEpilogue epilogue, const Tensor& bias, const Tensor& aux,
                                 const Tensor& d, Stream& stream) {
  const char* op = "matmul_bf16_epilogue";
  for (auto [name, t, dtype] : {std::tuple{"a", &a, DType::kBF16}, {"b", &b, DType::kBF16}}) {
    op_check::matrix(op, name, *t, "a 2-D bf16 tensor: reshape it first");
    op_check::tensor(op, name, *t, dtype, stream);
  }
  op_check::matrix(op, "d", d, "a 2-D tensor: reshape it first");
  LS_CHECK(d.dtype() == DType::kF32 || d.dtype() == DType::kBF16, op, ": d is ", d.describe(),
           "; expected f32 or bf16");
  op_check::tensor(op, "d", d, d.dtype(), stream);
  const detail::GemmDims dims = detail::check_gemm_shapes(op, a, trans_a, b, trans_b, d, 0);
  LS_CHECK(dims.k > 0, op,
           ": the inner dimension is empty (k = 0); use matmul_bf16, which "
           "scales d, and the separate bias/GELU kernels");
  const bool d_bf16 = d.dtype() == DType::kBF16;
  const char* name = gemm_epilogue_name(epilogue);
  if (detail::epilogue_has_bias(epilogue)) {
    op_check::tensor(op, "bias", bias, d.dtype(), stream);
    LS_CHECK(bias.ndim() == 1 && bias.dim(0) == dims.n, op, ": bias is ", bias.describe(),
             "; expected [", dims.n, "] of d's dtype, one value per column of d (", d.describe(),
             ")");
  } else {
    LS_CHECK(!bias.defined(), op, ": epilogue ", name, " takes no bias; pass Tensor()");
  }
  if (detail::epilogue_has_aux(epilogue)) {
    LS_CHECK(d_bf16, op, ": epilogue ", name, " writes a bf16 d; d is ", d.describe());
    op_check::tensor(op, "aux", aux, DType::kBF16, stream);
    LS_CHECK(aux.shape() == d.shape(), op, ": aux is ", aux.describe(), "; expected d's shape ",
             d.describe());
    LS_CHECK(dims.n % 8 == 0, op, ": epilogue ", name, " needs n (", dims.n,
             ") a multiple of 8 (cuBLASLt's aux leading dimension); use matmul_bf16 and the "
             "separate kernels");
    LS_CHECK(
        !op_check::overlaps(aux, d) && !op_check::overlaps(aux, a) && !op_check::overlaps(aux, b),
        op, ": aux (", aux.describe(), ") overlaps d or an input");
  } else {
    LS_CHECK(!aux.defined(), op, ": epilogue ", name, " takes no aux; pass Tensor()");
  }
  op_entry(
      &GemmEpilogueOps::gemm_bf16_epilogue, op, stream,
      [&] {
        // One cublasLtMatmul: the tensor-core product; the epilogue's reads and writes ride on it.
        Launch launch = ledger::gemm("cublasLtMatmul", trans_a, trans_b, dims.m, dims.n, dims.k, 1,
                                     2, 2, d_bf16 ? 2 : 4, false, LaunchRate::kTensorCore);
        launch.bytes += ledger::bytes(bias) + ledger::bytes(aux);
        launch.shape += std::string(" +") + name;
        return OpLaunches{launch};
      })(trans_a, trans_b, dims.m, dims.n, dims.k, a.bf16(), a.dim(1), b.bf16(), b.dim(1), epilogue,
         bias.defined() ? bias.data() : nullptr,
         aux.defined() ? static_cast<uint16_t*>(aux.data()) : nullptr, d.data(), d_bf16, stream);
}

}  // namespace ls
