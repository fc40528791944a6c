// matmul_bf16 and matmul_batched_bf16 (ops/gemm.h): a product of operands already cast to bf16
// equals matmul(..., kBF16) on the f32 tensors they came from, bit for bit, on every transpose and
// beta, on the host's bf16 units, on its emulated path, and on a GPU (cuBLAS; the CPU emulator runs
// it in CI). nn::linear in bf16 casts its input and weight once and uses matmul_bf16: its output
// and gradients are those of the three matmul(..., kBF16) calls it replaced. Bad dtypes are clear
// errors.
#include <gtest/gtest.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>

#include <vector>

#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/host/onednn_matmul.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

struct Case {
  bool trans_a, trans_b;
  float beta;
};
constexpr Case kCases[] = {
    {false, false, 0.0f}, {true, false, 1.0f}, {false, true, 0.5f}, {true, true, 0.0f}};

// On `device`: matmul_bf16 of the casts against matmul(..., kBF16) of the f32 tensors.
void expect_same_bits(Device device, Stream& stream) {
  const int64_t m = 37, n = 45, k = 70;  // big enough for oneDNN's f32 path and row splits
  for (const Case& c : kCases) {
    const Shape a_shape = c.trans_a ? Shape{k, m} : Shape{m, k};
    const Shape b_shape = c.trans_b ? Shape{n, k} : Shape{k, n};
    const Tensor a = Tensor::from_host(random_vector(m * k, 1), a_shape, device, stream);
    const Tensor b = Tensor::from_host(random_vector(k * n, 2), b_shape, device, stream);
    const std::vector<float> c0 = random_vector(m * n, 3);
    const Tensor want = Tensor::from_host(c0, {m, n}, device, stream);
    const Tensor got = Tensor::from_host(c0, {m, n}, device, stream);
    matmul(a, c.trans_a, b, c.trans_b, want, 0.75f, c.beta, stream, Precision::kBF16);
    matmul_bf16(cast_to_bf16(a, stream), c.trans_a, cast_to_bf16(b, stream), c.trans_b, got, 0.75f,
                c.beta, stream);
    EXPECT_EQ(got.to_host_f32(stream), want.to_host_f32(stream))
        << device_kind_name(device.kind) << " trans " << c.trans_a << c.trans_b << " beta "
        << c.beta;
  }
}

// The batched form, as attention uses it: 3 matrices per call.
void expect_same_bits_batched(Device device, Stream& stream) {
  const int64_t batch = 3, m = 33, n = 20, k = 40;
  for (const Case& c : kCases) {
    const Shape a_shape = c.trans_a ? Shape{batch, k, m} : Shape{batch, m, k};
    const Shape b_shape = c.trans_b ? Shape{batch, n, k} : Shape{batch, k, n};
    const Tensor a = Tensor::from_host(random_vector(batch * m * k, 9), a_shape, device, stream);
    const Tensor b = Tensor::from_host(random_vector(batch * k * n, 10), b_shape, device, stream);
    const std::vector<float> c0 = random_vector(batch * m * n, 11);
    const Tensor want = Tensor::from_host(c0, {batch, m, n}, device, stream);
    const Tensor got = Tensor::from_host(c0, {batch, m, n}, device, stream);
    matmul_batched(a, c.trans_a, b, c.trans_b, want, batch, 1.5f, c.beta, stream, Precision::kBF16);
    matmul_batched_bf16(cast_to_bf16(a, stream), c.trans_a, cast_to_bf16(b, stream), c.trans_b, got,
                        batch, 1.5f, c.beta, stream);
    EXPECT_EQ(got.to_host_f32(stream), want.to_host_f32(stream))
        << device_kind_name(device.kind) << " batched, trans " << c.trans_a << c.trans_b << " beta "
        << c.beta;
  }
}

class MatmulBf16 : public OpTestBase {};

TEST_F(MatmulBf16, EqualsTheRoundingProductBitForBitOnEveryHostPath) {
  const bool native_was = onednn::native_bf16_enabled();
  for (bool native : {false, true}) {
    if (native && !onednn::native_bf16_available()) continue;
    onednn::set_native_bf16_enabled(native);
    SCOPED_TRACE(native ? "bf16 units" : "emulated");
    expect_same_bits(dev_, *stream_);
    expect_same_bits_batched(dev_, *stream_);
  }
  onednn::set_native_bf16_enabled(native_was);
}

TEST_F(MatmulBf16, WrongDtypesAreClearErrors) {
  const Tensor f = upload(random_vector(16, 4), {4, 4});
  const Tensor h = cast_to_bf16(f, *stream_);
  Tensor c = Tensor::empty({4, 4}, DType::kF32, dev_);
  EXPECT_TRUE(contains(error_of([&] { matmul_bf16(f, false, h, false, c, 1, 0, *stream_); }),
                       "matmul_bf16"));
  EXPECT_TRUE(
      contains(error_of([&] { matmul_bf16(h, false, f, false, c, 1, 0, *stream_); }), "bf16"));
  Tensor c16 = Tensor::empty({4, 4}, DType::kBF16, dev_);
  EXPECT_TRUE(
      contains(error_of([&] { matmul_bf16(h, false, h, false, c16, 1, 0, *stream_); }), "f32"));
}

// nn::linear in bf16 against the products it replaced: y = x W^T + b, dx = dy W, dW = dy^T x,
// each matmul(..., kBF16) of the f32 tensors.
TEST_F(MatmulBf16, Bf16LinearIsTheRoundingProducts) {
  const int64_t rows = 33, in = 40, out = 24;
  const std::vector<float> xv = random_vector(rows * in, 5), wv = random_vector(out * in, 6);
  const std::vector<float> bv = random_vector(out, 7), dyv = random_vector(rows * out, 8);
  Tape tape(*stream_);
  tape.set_context({.precision = Precision::kBF16});
  Var x = tape.differentiable_input(upload(xv, {rows, in}));
  Var w = tape.differentiable_input(upload(wv, {out, in}));
  Var b = tape.differentiable_input(upload(bv, {out}));
  Var y = nn::linear(tape, x, w, &b);
  tape.backward(y, upload(dyv, {rows, out}));

  const Tensor xt = upload(xv, {rows, in}), wt = upload(wv, {out, in}),
               dy = upload(dyv, {rows, out});
  Tensor want_y = Tensor::empty({rows, out}, DType::kF32, dev_);
  Tensor want_dx = Tensor::empty({rows, in}, DType::kF32, dev_);
  Tensor want_dw = Tensor::empty({out, in}, DType::kF32, dev_);
  matmul(xt, false, wt, true, want_y, 1.0f, 0.0f, *stream_, Precision::kBF16);
  std::vector<float> y_ref = download(want_y);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out; ++j) y_ref[r * out + j] += bv[j];
  }
  matmul(dy, false, wt, false, want_dx, 1.0f, 0.0f, *stream_, Precision::kBF16);
  matmul(dy, true, xt, false, want_dw, 1.0f, 0.0f, *stream_, Precision::kBF16);
  EXPECT_EQ(download(y->value), y_ref);
  EXPECT_EQ(download(x->grad), download(want_dx));
  EXPECT_EQ(download(w->grad), download(want_dw));
}

class CudaMatmulBf16 : public CudaVsHostTest {};

TEST_F(CudaMatmulBf16, EqualsTheRoundingProductBitForBitOnAGpu) {
  expect_same_bits(kCuda0, *cuda_);
  expect_same_bits_batched(kCuda0, *cuda_);
}

}  // namespace
}  // namespace ls::test
