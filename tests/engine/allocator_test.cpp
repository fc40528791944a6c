// The caching allocator: size classes, reuse without system allocation after warm-up, stats.
#include <lockstep/allocator.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>

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
  // Above 1 MiB: multiples of 1/16 of the next power of two.
  EXPECT_EQ(CachingAllocator::round_size((1 << 20) + 1), (size_t{1} << 20) + (size_t{1} << 17));
  EXPECT_EQ(CachingAllocator::round_size(3'000'000), 3'145'728u);
  EXPECT_EQ(CachingAllocator::round_size(25'518'080), 27'262'976u);  // 13/16 of 32 MiB
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

// A system that has room for `limit` bytes in all, counting what it handed out and took back.
struct LimitedSystem {
  explicit LimitedSystem(size_t limit_bytes) : limit(limit_bytes) {}
  size_t limit, held = 0;
  int frees = 0;
  std::map<void*, size_t> sizes;
  CachingAllocator allocator(CachingAllocator::OnOutOfMemory on_oom) {
    return CachingAllocator(
        [this](size_t bytes) -> void* {
          if (held + bytes > limit) return nullptr;
          held += bytes;
          void* p = ::operator new(bytes);
          sizes[p] = bytes;
          return p;
        },
        [this](void* p) {
          held -= sizes.at(p);
          sizes.erase(p);
          ++frees;
          ::operator delete(p);
        },
        on_oom);
  }
};

// The CUDA policy (Note [Out of memory while peers communicate]): nothing is freed, and the
// error names the bytes asked, in use and cached.
TEST(CachingAllocator, OutOfMemoryThatMustNotFreeKeepsTheCacheAndSaysWhatIsHeld) {
  LimitedSystem system{8192};
  CachingAllocator alloc = system.allocator(CachingAllocator::OnOutOfMemory::kFail);
  void* small = alloc.allocate(2048);
  void* cached = alloc.allocate(4096);
  alloc.free(cached);  // 4096 cached, 2048 in use, 2048 left in the system
  try {
    alloc.allocate(6000);  // 6144 after rounding: only possible by freeing the cache
    FAIL() << "allocated past the system's limit";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory: could not allocate 6144 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("2048 bytes in use by tensors, 6144 reserved, of which 4096 cached"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(system.frees, 0);
  EXPECT_EQ(alloc.stats().system_frees, 0);
  EXPECT_EQ(alloc.allocate(4096), cached) << "the cache must survive the failure";
  alloc.free(cached);
  alloc.free(small);
}

// The host policy: the cache goes back to the system and the allocation is retried.
TEST(CachingAllocator, OutOfMemoryThatMayFreeReleasesTheCacheAndRetries) {
  LimitedSystem system{8192};
  CachingAllocator alloc = system.allocator(CachingAllocator::OnOutOfMemory::kReleaseCacheAndRetry);
  void* small = alloc.allocate(2048);
  alloc.free(alloc.allocate(4096));
  void* big = alloc.allocate(6000);
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(system.frees, 1);  // the cached block went back
  alloc.free(big);
  alloc.free(small);
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
