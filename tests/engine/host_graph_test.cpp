// Graph capture on the host backend (engine/core/graph.h) and the allocator's capture pools:
// captured work does not run until launched; launches replay it on the captured streams in order,
// with cross-stream events, bitwise like eager work; a pool keeps its memory for the graph and
// takes cached blocks first; misuse is a clear error that leaves the streams usable.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/elementwise.h"

namespace ls {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

// x += 1 on `compute`, then, ordered by an event, y = 2 * x on `side` (written into y by axpy
// on a zeroed y), joined back into `compute`: the shape of a step's compute and comm streams.
void enqueue_work(const Tensor& ones, const Tensor& x, const Tensor& y, Stream& compute,
                  Stream& side, Event& ready, Event& joined) {
  axpy(1.0f, ones, x, compute);
  compute.record(ready);
  side.wait(ready);
  fill(y, 0.0f, side);
  axpy(2.0f, x, y, side);
  side.record(joined);
  compute.wait(joined);
}

TEST(HostGraph, CapturedWorkRunsOnlyWhenLaunchedAndReplaysInOrder) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto compute = rt.create_stream(), side = rt.create_stream();
  auto ready = rt.create_event(), joined = rt.create_event();
  Tensor x = Tensor::from_host(std::vector<float>(4, 0.0f), {4}, kHost0, *compute);
  Tensor y = Tensor::from_host(std::vector<float>(4, 0.0f), {4}, kHost0, *compute);
  const Tensor ones = Tensor::from_host(std::vector<float>(4, 1.0f), {4}, kHost0, *compute);
  rt.begin_capture(*compute, {side.get()});
  EXPECT_TRUE(rt.capturing(*compute));
  EXPECT_TRUE(rt.capturing(*side));
  enqueue_work(ones, x, y, *compute, *side, *ready, *joined);
  std::unique_ptr<StreamGraph> graph = rt.end_capture(*compute);
  EXPECT_FALSE(rt.capturing(*compute));
  EXPECT_FALSE(rt.capturing(*side));
  EXPECT_EQ(x.to_host_f32(*compute), std::vector<float>(4, 0.0f)) << "captured work ran";
  // Nodes: axpy, record, wait, fill, axpy, record, wait.
  EXPECT_EQ(graph->nodes(), 7);
  for (int launch = 1; launch <= 3; ++launch) {
    graph->launch(*compute);
    EXPECT_EQ(x.to_host_f32(*compute), std::vector<float>(4, static_cast<float>(launch)));
    EXPECT_EQ(y.to_host_f32(*compute), std::vector<float>(4, 2.0f * static_cast<float>(launch)));
  }
}

TEST(HostGraph, SynchronizingACapturedStreamIsAnErrorAndCaptureGoesOn) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto stream = rt.create_stream();
  Tensor x = Tensor::from_host(std::vector<float>(2, 1.0f), {2}, kHost0, *stream);
  rt.begin_capture(*stream, {});
  scale(x, 3.0f, *stream);
  EXPECT_THROW(stream->synchronize(), Error);
  std::unique_ptr<StreamGraph> graph = rt.end_capture(*stream);
  graph->launch(*stream);
  EXPECT_EQ(x.to_host_f32(*stream), std::vector<float>(2, 3.0f));
}

TEST(HostGraph, EndingACaptureOnAJoinedStreamIsAnErrorThatKeepsTheCapture) {
  DeviceRuntime& rt = device_runtime(kHost0);
  auto origin = rt.create_stream(), joined = rt.create_stream();
  rt.begin_capture(*origin, {joined.get()});
  EXPECT_THROW(rt.end_capture(*joined), Error);
  EXPECT_TRUE(rt.capturing(*origin));  // still the capture it was, nothing freed
  EXPECT_TRUE(rt.capturing(*joined));
  EXPECT_THROW(rt.begin_capture(*joined, {}), Error);  // captures do not nest
  std::unique_ptr<StreamGraph> graph = rt.end_capture(*origin);
  EXPECT_FALSE(rt.capturing(*joined));
  EXPECT_EQ(graph->nodes(), 0);
}

CachingAllocator malloc_allocator() {
  return CachingAllocator([](size_t bytes) { return std::malloc(bytes); },
                          [](void* p) { std::free(p); });
}

TEST(CapturePool, KeepsItsBlocksForTheGraphAndTakesCachedOnesFirst) {
  CachingAllocator alloc = malloc_allocator();
  void* cached = alloc.allocate(1000);
  alloc.free(cached);  // in the allocator's cache
  auto pool = alloc.begin_capture_pool();
  void* a = alloc.allocate(1000);
  EXPECT_EQ(a, cached) << "the capture took a cached block before asking the system";
  alloc.free(a);
  void* b = alloc.allocate(1000);
  EXPECT_EQ(b, a) << "reused within the capture, in stream order";
  alloc.free(b);
  alloc.end_capture_pool();
  // Outside the capture, the pool's block is not handed out: the graph owns it.
  void* other = alloc.allocate(1000);
  EXPECT_NE(other, a);
  alloc.free(other);
  // Another thread allocating during a capture is not part of it.
  auto second = alloc.begin_capture_pool();
  void* from_thread = nullptr;
  std::thread([&] { from_thread = alloc.allocate(1000); }).join();
  EXPECT_NE(from_thread, a);
  alloc.free(from_thread);
  alloc.end_capture_pool();
  second.reset();
  pool.reset();  // the graph is gone: its block is the allocator's again
  void* again = alloc.allocate(1000);
  EXPECT_TRUE(again == a || again == other || again == from_thread);
  alloc.free(again);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0);
}

TEST(CapturePool, CapturesDoNotNestOnAThread) {
  CachingAllocator alloc = malloc_allocator();
  auto pool = alloc.begin_capture_pool();
  EXPECT_THROW(alloc.begin_capture_pool(), Error);
  alloc.end_capture_pool();
}

TEST(CapturePool, OutOfMemoryWhileCapturingIsAnErrorAtOnce) {
  int frees = 0;
  CachingAllocator alloc([](size_t bytes) { return bytes > 4096 ? nullptr : std::malloc(bytes); },
                         [&](void* p) { ++frees, std::free(p); });
  alloc.free(alloc.allocate(512));  // a cached block the eager path would release
  auto pool = alloc.begin_capture_pool();
  EXPECT_THROW(alloc.allocate(1 << 20), Error);
  EXPECT_EQ(frees, 0) << "a capture must not free cached blocks";
  alloc.end_capture_pool();
}

}  // namespace
}  // namespace ls
