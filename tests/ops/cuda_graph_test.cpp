// CUDA graph capture (engine/core/graph.h, engine/core/cuda/cuda_graph.h): a step of kernels on
// an origin stream and a joined stream, captured once and launched again, gives the eager
// results bitwise, reading the inputs' current values at each launch; memory allocated during
// the capture (a temporary tensor, the 16-bit GEMM operands) stays the graph's; a host wait on a
// capturing stream is refused without breaking the capture; a capture that fails leaves the
// stream usable. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/graph.h"
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_availability().device_count == 0)
      GTEST_SKIP() << cuda_availability().reason_unavailable;
    runtime_ = &device_runtime(kCuda0);
    origin_ = runtime_->create_stream();
    side_ = runtime_->create_stream();
  }
  void TearDown() override {
    if (origin_) origin_->synchronize();
    if (side_) side_->synchronize();
  }

  // origin: y = gelu(x) * 2, then out = y + side's result; side (forked from origin and joined
  // back): z = x + x scaled by 0.5. The same calls run eagerly and under capture.
  void step(const Tensor& x, const Tensor& y, const Tensor& z, const Tensor& out, Event& fork,
            Event& join) {
    origin_->record(fork);
    side_->wait(fork);
    gelu(x, y, *origin_);
    scale(y, 2.0f, *origin_);
    add(x, x, z, *side_);
    scale(z, 0.5f, *side_);
    side_->record(join);
    origin_->wait(join);
    add(y, z, out, *origin_);
  }

  void set(const Tensor& t, const std::vector<float>& values) {
    t.copy_from_host_async(values.data(), values.size() * sizeof(float), *origin_);
    origin_->synchronize();
  }

  DeviceRuntime* runtime_ = nullptr;
  std::unique_ptr<Stream> origin_, side_;
};

TEST_F(CudaGraphTest, ReplayOfTwoStreamsEqualsEagerBitwise) {
  const int64_t n = 100003;
  auto fork = runtime_->create_event(), join = runtime_->create_event();
  Tensor x = Tensor::empty({n}, DType::kF32, kCuda0);
  Tensor y = Tensor::empty({n}, DType::kF32, kCuda0), z = Tensor::empty({n}, DType::kF32, kCuda0);
  Tensor out = Tensor::empty({n}, DType::kF32, kCuda0);
  Tensor ey = Tensor::empty({n}, DType::kF32, kCuda0), ez = Tensor::empty({n}, DType::kF32, kCuda0);
  Tensor eager = Tensor::empty({n}, DType::kF32, kCuda0);

  set(x, random_vector(n, 1, -3.0f, 3.0f));
  runtime_->begin_capture(*origin_, {side_.get()});
  EXPECT_TRUE(runtime_->capturing(*origin_));
  step(x, y, z, out, *fork, *join);
  EXPECT_TRUE(runtime_->capturing(*side_));  // it joined by waiting on an event of the capture
  std::unique_ptr<StreamGraph> graph = runtime_->end_capture(*origin_);
  EXPECT_FALSE(runtime_->capturing(*origin_));
  EXPECT_FALSE(runtime_->capturing(*side_));
  EXPECT_GE(graph->nodes(), 5);  // five kernels, plus whatever the joins became

  // Each launch reads x where the capture saw it, with the values x holds now.
  for (uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(testing::Message() << "inputs " << seed);
    set(x, random_vector(n, seed, -3.0f, 3.0f));
    set(out, std::vector<float>(n, std::nanf("")));
    graph->launch(*origin_);
    origin_->synchronize();
    step(x, ey, ez, eager, *fork, *join);
    EXPECT_TRUE(bitwise_equal(out.to_host_f32(*origin_), eager.to_host_f32(*origin_)));
  }
}

// A temporary tensor and the 16-bit copies of a bf16 GEMM are allocated and freed during the
// capture: they come from the graph's pool, so memory allocated after the capture never lands
// on them, and the launches still find them.
TEST_F(CudaGraphTest, MemoryAllocatedDuringCaptureStaysTheGraphs) {
  const int64_t m = 64, k = 96, n = 48;
  Tensor a = Tensor::empty({m, k}, DType::kF32, kCuda0),
         b = Tensor::empty({k, n}, DType::kF32, kCuda0);
  Tensor c = Tensor::empty({m, n}, DType::kF32, kCuda0),
         eager = Tensor::empty({m, n}, DType::kF32, kCuda0);
  set(a, random_vector(m * k, 1));
  set(b, random_vector(k * n, 2));
  // Warm the cuBLAS handle and this stream's workspace outside the capture.
  matmul(a, false, b, false, eager, 1.0f, 0.0f, *origin_, Precision::kBF16);
  origin_->synchronize();

  runtime_->begin_capture(*origin_, {});
  void* temporary_address = nullptr;
  {
    Tensor temporary = Tensor::empty({m, k}, DType::kF32, kCuda0);
    temporary_address = temporary.data();
    gelu(a, temporary, *origin_);
    matmul(temporary, false, b, false, c, 1.0f, 0.0f, *origin_, Precision::kBF16);
  }  // temporary is freed here, back into the graph's pool
  std::unique_ptr<StreamGraph> graph = runtime_->end_capture(*origin_);

  // Same sizes as the capture's blocks: served from the allocator's cache, never the pool's.
  std::vector<Tensor> after;
  for (int i = 0; i < 4; ++i) {
    after.push_back(Tensor::empty({m, k}, DType::kF32, kCuda0));
    EXPECT_NE(after.back().data(), temporary_address);
    fill(after.back(), std::nanf(""), *origin_);
  }
  graph->launch(*origin_);
  Tensor eager_temporary = Tensor::empty({m, k}, DType::kF32, kCuda0);
  gelu(a, eager_temporary, *origin_);
  matmul(eager_temporary, false, b, false, eager, 1.0f, 0.0f, *origin_, Precision::kBF16);
  EXPECT_TRUE(bitwise_equal(c.to_host_f32(*origin_), eager.to_host_f32(*origin_)));
}

TEST_F(CudaGraphTest, SynchronizeWhileCapturingIsRefusedAndTheCaptureSurvives) {
  const int64_t n = 1000;
  Tensor x = Tensor::empty({n}, DType::kF32, kCuda0);
  set(x, std::vector<float>(n, 1.0f));
  runtime_->begin_capture(*origin_, {});
  scale(x, 3.0f, *origin_);
  try {
    origin_->synchronize();
    ADD_FAILURE() << "synchronize() on a capturing stream did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("being captured into a graph"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(origin_->check(), Error);
  std::unique_ptr<StreamGraph> graph = runtime_->end_capture(*origin_);
  graph->launch(*origin_);
  EXPECT_TRUE(bitwise_equal(x.to_host_f32(*origin_), std::vector<float>(n, 3.0f)));
}

// Querying an event recorded during the capture is illegal (cudaErrorCapturedEvent); whether or
// not CUDA also invalidates the capture, end_capture either returns a graph or says that the
// engine falls back to eager steps, and the stream is out of capture and usable afterwards.
TEST_F(CudaGraphTest, AFailedCaptureLeavesTheStreamUsable) {
  const int64_t n = 1000;
  Tensor x = Tensor::empty({n}, DType::kF32, kCuda0);
  set(x, std::vector<float>(n, 1.0f));
  auto marker = runtime_->create_event();
  runtime_->begin_capture(*origin_, {});
  scale(x, 3.0f, *origin_);
  origin_->record(*marker);
  try {
    (void)marker->query();
    ADD_FAILURE() << "query() of an event recorded during a capture did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("captured into a graph"), std::string::npos) << e.what();
  }
  try {
    (void)runtime_->end_capture(*origin_);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("falls back to eager steps"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(runtime_->capturing(*origin_));
  set(x, std::vector<float>(n, 1.0f));
  scale(x, 5.0f, *origin_);
  origin_->record(*marker);
  EXPECT_TRUE(bitwise_equal(x.to_host_f32(*origin_), std::vector<float>(n, 5.0f)));
  EXPECT_TRUE(marker->query());  // recorded again outside a capture: usable again
}

}  // namespace
}  // namespace ls::test
