// matmul: argument checks (dtype, rank, device, matching dimensions, no aliasing of c), then the
// stream's kernel table. Row-major 2-D tensors: the leading dimension is each tensor's dim(1).
#include "ops/gemm.h"

#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "ops/kernels.h"

namespace ls {
namespace {

void expect_matrix(const char* name, const Tensor& t, const Stream& stream) {
  LS_CHECK(t.defined(), "matmul: ", name, " is an undefined Tensor; pass a 2-D f32 tensor");
  LS_CHECK(t.dtype() == DType::kF32 && t.ndim() == 2, "matmul: ", name, " is ", t.describe(),
           "; expected a 2-D f32 tensor (reshape or cast it first)");
  LS_CHECK(t.device() == stream.device(), "matmul: ", name, " is ", t.describe(),
           " but the stream runs on ", stream.device().str(),
           "; all tensors must be on the stream's device");
}

bool overlaps(const Tensor& x, const Tensor& y) {
  auto* x0 = static_cast<const char*>(x.data());
  auto* y0 = static_cast<const char*>(y.data());
  return x.nbytes() > 0 && y.nbytes() > 0 && x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}

// "op(a) is 784 x 128 (a is f32[128, 784] on host:0, trans_a=true)"
std::string describe_op(const char* name, const Tensor& t, bool trans, int64_t rows, int64_t cols) {
  return detail::concat("op(", name, ") is ", rows, " x ", cols, " (", name, " is ", t.describe(),
                        ", trans_", name, "=", trans ? "true" : "false", ")");
}

}  // namespace

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
            float alpha, float beta, Stream& stream) {
  expect_matrix("a", a, stream);
  expect_matrix("b", b, stream);
  expect_matrix("c", c, stream);
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (k != kb) {
    // Suggest the flag that would make the shapes agree, the usual cause of this error.
    const char* hint = "";
    if (k == (trans_b ? b.dim(0) : b.dim(1))) {
      hint = trans_b ? "; pass trans_b=false?" : "; pass trans_b=true?";
    } else if ((trans_a ? a.dim(1) : a.dim(0)) == kb) {
      hint = trans_a ? "; pass trans_a=false?" : "; pass trans_a=true?";
    }
    LS_THROW("matmul: inner dimensions differ: ", describe_op("a", a, trans_a, m, k), " and ",
             describe_op("b", b, trans_b, kb, n), hint);
  }
  LS_CHECK(c.dim(0) == m && c.dim(1) == n, "matmul: c is ", c.describe(), "; expected [", m, ", ",
           n, "] (rows of op(a) x columns of op(b)): ", describe_op("a", a, trans_a, m, k), ", ",
           describe_op("b", b, trans_b, k, n));
  LS_CHECK(!overlaps(c, a) && !overlaps(c, b), "matmul: c (", c.describe(),
           ") overlaps an input; write the product to a separate tensor");
  kernels_for(stream.device())
      .gemm(trans_a, trans_b, m, n, k, alpha, a.f32(), a.dim(1), b.f32(), b.dim(1), beta, c.f32(),
            c.dim(1), stream);
}

}  // namespace ls
