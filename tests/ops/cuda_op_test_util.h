// Shared fixture of the CUDA-vs-host op tests (tests/ops/cuda_*_test.cpp): CudaVsHostTest skips
// without a GPU, holds one stream on host:0 and one on cuda:0 (both synchronized at the end of a
// test), and makes Pairs (a tensor with the same contents on both devices) to run an op on each
// backend and compare the results. Comparisons use the helpers of tests/ops/op_test_util.h.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/dtype.h>
#include "engine/core/runtime.h"
#include "ops/elementwise.h"
#include <lockstep/stream.h>
#include <lockstep/tensor.h>
#include "tests/ops/op_test_util.h"

namespace ls::test {

inline const Device kCuda0{DeviceKind::kCuda, 0};

// A tensor with the same contents on host:0 and on cuda:0.
struct Pair {
  Tensor host, cuda;
};

class CudaVsHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_availability().device_count == 0)
      GTEST_SKIP() << cuda_availability().reason_unavailable;
    host_ = device_runtime(host0()).create_stream();
    cuda_ = device_runtime(kCuda0).create_stream();
  }
  void TearDown() override {
    if (host_) host_->synchronize();
    if (cuda_) cuda_->synchronize();
  }

  Pair upload(const std::vector<float>& v, const Shape& shape) {
    return {Tensor::from_host(v, shape, host0(), *host_),
            Tensor::from_host(v, shape, kCuda0, *cuda_)};
  }
  Pair upload_i32(const std::vector<int32_t>& v, const Shape& shape) {
    return {Tensor::from_host_i32(v, shape, host0(), *host_),
            Tensor::from_host_i32(v, shape, kCuda0, *cuda_)};
  }
  Pair empty(const Shape& shape, DType dtype = DType::kF32) {
    return {Tensor::empty(shape, dtype, host0()), Tensor::empty(shape, dtype, kCuda0)};
  }

  // op(stream, side) once on host:0 and once on cuda:0 (the checked ops pick the backend);
  // side(pair) is that backend's tensor of a Pair.
  template <typename Op>
  void run_both(Op op) {
    op(*host_, [](const Pair& p) { return p.host; });
    op(*cuda_, [](const Pair& p) { return p.cuda; });
  }

  // values cast to bf16 on both backends (the same bits).
  Pair bf16(const std::vector<float>& values, const Shape& shape) {
    const Pair f32 = upload(values, shape);
    Pair out = empty(shape, DType::kBF16);
    run_both([&](Stream& s, auto side) { cast(side(f32), side(out), s); });
    return out;
  }
  // p widened to f32 on both backends (itself when f32), to compare as f32.
  Pair f32_of(const Pair& p) {
    if (p.host.dtype() == DType::kF32) return p;
    Pair out = empty(p.host.shape());
    run_both([&](Stream& s, auto side) { cast(side(p), side(out), s); });
    return out;
  }

  std::vector<float> host_values(const Pair& p) { return p.host.to_host_f32(*host_); }
  std::vector<float> cuda_values(const Pair& p) { return p.cuda.to_host_f32(*cuda_); }

  void expect_close(const Pair& p, double rtol = 1e-5, double atol = 1e-6) {
    EXPECT_TRUE(all_close(cuda_values(p), to_double(host_values(p)), rtol, atol));
  }
  void expect_bitwise(const Pair& p) { EXPECT_TRUE(bitwise_equal(cuda_values(p), host_values(p))); }
  void expect_equal_i32(const Pair& p) {
    EXPECT_EQ(p.cuda.to_host_i32(*cuda_), p.host.to_host_i32(*host_));
  }

  std::unique_ptr<Stream> host_;
  std::unique_ptr<Stream> cuda_;
};

}  // namespace ls::test
