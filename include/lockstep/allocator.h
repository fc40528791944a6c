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
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
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

  // What an allocation the system refuses does: freeing cached blocks is safe on the host, but on
  // a GPU it would synchronize the device while peers' collectives may still need it, so CUDA
  // allocators fail at once, naming the bytes asked, in use and cached.
  enum class OnOutOfMemory {
    kReleaseCacheAndRetry,  // give every cached block back, ask once more (host memory)
    kFail,                  // free nothing: fail with the bytes asked, in use and cached (CUDA)
  };

  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free,
                   OnOutOfMemory on_oom = OnOutOfMemory::kReleaseCacheAndRetry);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t bytes);
  void free(void* ptr);
  // Returns every cached (unused) block to the system. On CUDA, only while no collective of any
  // device may be in flight (cudaFree synchronizes the device).
  void release_cached();
  AllocatorStats stats() const;
  // Starts a new high-water mark: peak_bytes_in_use becomes bytes_in_use (as PyTorch's
  // reset_peak_memory_stats), e.g. between runs that reuse a device in one process.
  void reset_peak();
  // The same without waiting: nullopt while another thread holds the allocator, which may be
  // inside the system's allocation call (a cudaMalloc stuck on a wedged GPU). For monitors.
  std::optional<AllocatorStats> try_stats() const;

  // Graph pools (the engine's CUDA/host graphs). Between begin_capture_pool() and
  // end_capture_pool(), the calling thread's allocations come from a pool of their own: blocks
  // freed back to it are handed out again within it (a capture reuses its memory in stream order,
  // as an eager step does) and never to anybody else, so a graph launch finds its memory where its
  // capture left it. A pool with no block of a size takes one from the allocator's cache before
  // asking the system. The pool lives as long as the handle (the graph holds it); then its cached
  // blocks return to the allocator's, and blocks still live return there when freed. Out of memory
  // while capturing is an error at once (a CUDA capture forbids freeing cached blocks).
  class CapturePool;
  std::shared_ptr<CapturePool> begin_capture_pool();
  void end_capture_pool();  // for the calling thread
  // The size class a request is rounded up to: multiples of 512 B up to 1 MiB, then of 1/16 of
  // the next power of two, which bounds the waste at 6.25% (eighths wasted 15% on AdamW's two
  // moment buffers of a 12.8 M-parameter model sharded two ways: docs/benchmarks.md, ZeRO-3).
  static size_t round_size(size_t bytes);

 private:
  struct LiveBlock {
    size_t size;       // size class
    uint64_t pool;     // 0: the allocator's own; else a capture pool's id
  };
  using FreeLists = std::map<size_t, std::vector<void*>>;  // size class -> cached blocks
  void release_pool(uint64_t pool);  // by ~CapturePool
  FreeLists& free_lists_locked(uint64_t pool);
  // A cached block of `size` for `pool`: its own, else the allocator's; null when none.
  void* take_cached_locked(uint64_t pool, size_t size);

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  FreeLists free_blocks_;
  std::map<void*, LiveBlock> live_blocks_;   // handed out
  std::map<uint64_t, FreeLists> pools_;      // live capture pools' cached blocks
  std::map<std::thread::id, uint64_t> capturing_;  // thread -> the pool it allocates from
  uint64_t next_pool_ = 1;
  AllocatorStats stats_;
  OnOutOfMemory on_oom_;
};

class CachingAllocator::CapturePool {
 public:
  CapturePool(CachingAllocator& owner, uint64_t id) : owner_(owner), id_(id) {}
  ~CapturePool() { owner_.release_pool(id_); }
  CapturePool(const CapturePool&) = delete;
  CapturePool& operator=(const CapturePool&) = delete;

 private:
  CachingAllocator& owner_;
  uint64_t id_;
};

}  // namespace ls
