// The caching allocator: size classes, reuse without system allocation after warm-up, stats.
#include "engine/core/allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/core/runtime.h"
#include "engine/core/tensor.h"

namespace ls {
namespace {

CachingAllocator make_malloc_allocator() {
  return CachingAllocator([](size_t n) { return std::malloc(n); }, [](void* p) { std::free(p); });
}

TEST(CachingAllocator, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(1 << 20), size_t{1} << 20);
  // Above 1 MiB: multiples of 1/8 of the next power of two.
  EXPECT_EQ(CachingAllocator::round_size((1 << 20) + 1), (size_t{1} << 20) + (size_t{1} << 18));
  EXPECT_EQ(CachingAllocator::round_size(3'000'000), 3'145'728u);
}

TEST(CachingAllocator, ReusesFreedBlocksWithoutSystemCalls) {
  CachingAllocator alloc = make_malloc_allocator();
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(5000);
  alloc.free(a);
  alloc.free(b);
  const AllocatorStats warm = alloc.stats();
  EXPECT_EQ(warm.system_allocs, 2);
  for (int i = 0; i < 10; ++i) {
    void* x = alloc.allocate(900);   // same class as 1000
    void* y = alloc.allocate(4700);  // same class as 5000
    alloc.free(y);
    alloc.free(x);
  }
  const AllocatorStats after = alloc.stats();
  EXPECT_EQ(after.system_allocs, warm.system_allocs);
  EXPECT_EQ(after.cache_hits, 20);
  EXPECT_EQ(after.bytes_in_use, 0);
  EXPECT_EQ(after.bytes_reserved, 1024 + 5120);
  alloc.release_cached();
  EXPECT_EQ(alloc.stats().system_frees, 2);
  EXPECT_EQ(alloc.stats().bytes_reserved, 0);
}

TEST(CachingAllocator, ResetPeakStartsANewHighWaterMark) {
  CachingAllocator alloc = make_malloc_allocator();
  void* big = alloc.allocate(8192);
  void* small = alloc.allocate(512);
  alloc.free(big);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 8192 + 512);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 512);  // what is in use now
  void* again = alloc.allocate(1024);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 512 + 1024);
  alloc.free(again);
  alloc.free(small);
}

TEST(CachingAllocator, OutOfMemoryIsAClearError) {
  CachingAllocator alloc([](size_t) -> void* { return nullptr; }, [](void*) {});
  try {
    alloc.allocate(4096);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
  }
}

TEST(CachingAllocator, TensorsOnAHostDeviceAreServedFromTheCache) {
  const Device device{DeviceKind::kHost, 3};  // a device no other test uses
  CachingAllocator& alloc = device_runtime(device).allocator();
  { Tensor warm = Tensor::empty({256, 784}, DType::kF32, device); }
  const int64_t before = alloc.stats().system_allocs;
  for (int i = 0; i < 5; ++i) Tensor t = Tensor::empty({256, 784}, DType::kF32, device);
  EXPECT_EQ(alloc.stats().system_allocs, before);
}

}  // namespace
}  // namespace ls
