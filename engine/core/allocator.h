// A caching allocator per device, so that after warm-up a training step never asks the system
// (malloc, cudaMalloc) for memory: a cudaMalloc in one thread while other threads sit in NCCL
// kernels can deadlock the whole clique (see DESIGN.md).
//
// Sizes are rounded up to size classes; freed blocks go to a free list for their class and are
// handed out again. Blocks are reused only in stream order: the engine allocates and frees the
// memory of a step on one stream per device, so a block freed by the host may be handed out again
// at once (later work on the stream runs after earlier work). Memory used across streams must be
// kept alive by its owner until the other stream has finished with it.
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace ls {

struct AllocatorStats {
  int64_t system_allocs = 0;    // calls to the backend's raw allocation
  int64_t system_frees = 0;     // calls to the backend's raw free
  int64_t bytes_reserved = 0;   // held from the system
  int64_t bytes_in_use = 0;     // handed out to tensors
  int64_t peak_bytes_in_use = 0;
  int64_t cache_hits = 0;       // allocations served from a free list
};

class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t bytes)>;
  using RawFree = std::function<void(void* ptr)>;

  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes);
  void free(void* ptr);
  // Returns every cached (unused) block to the system.
  void release_cached();
  AllocatorStats stats() const;
  // Starts a new high-water mark: peak_bytes_in_use becomes bytes_in_use (as PyTorch's
  // reset_peak_memory_stats), e.g. between runs that reuse a device in one process.
  void reset_peak();
  // The same without waiting: nullopt while another thread holds the allocator, which may be
  // inside the system's allocation call (a cudaMalloc stuck on a wedged GPU). For monitors.
  std::optional<AllocatorStats> try_stats() const;

  // The size class a request is rounded up to: multiples of 512 B up to 1 MiB, then of 1/8 of the
  // next power of two, which bounds the waste at 12.5%.
  static size_t round_size(size_t bytes);

 private:
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;  // size class -> cached blocks
  std::map<void*, size_t> live_blocks_;                // handed out -> size class
  AllocatorStats stats_;
};

}  // namespace ls
