// The caching allocator (see lockstep/allocator.h for the contract).
#include <lockstep/allocator.h>

#include <bit>

#include <lockstep/error.h>

namespace ls {

// Note [Out of memory while peers communicate]
// cudaFree synchronizes the device: on a replica thread while a peer's NCCL kernel waits for
// this device's part of a collective, it waits for a kernel that waits for us, and the clique
// hangs (the known NCCL deadlock; DESIGN.md). So the CUDA allocators never give their cache back
// on out-of-memory: the allocation fails at once with an error naming the bytes asked, in use
// and cached, and the step fails like any other (every replica aborted, the error to the caller).
// Host memory has no such hazard, so the host allocators release their cache and retry.
CachingAllocator::CachingAllocator(RawAlloc raw_alloc, RawFree raw_free, OnOutOfMemory on_oom)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)), on_oom_(on_oom) {}

CachingAllocator::~CachingAllocator() {
  release_cached();
  // Blocks still live belong to tensors that outlive the runtime (static objects); they are left
  // to the process exit rather than freed under their owners.
}

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmallQuantum = 512;
  constexpr size_t kSmallLimit = size_t{1} << 20;
  if (bytes == 0) return kSmallQuantum;
  if (bytes <= kSmallLimit) return (bytes + kSmallQuantum - 1) / kSmallQuantum * kSmallQuantum;
  size_t quantum = std::bit_ceil(bytes) / 16;
  return (bytes + quantum - 1) / quantum * quantum;
}

CachingAllocator::FreeLists& CachingAllocator::free_lists_locked(uint64_t pool) {
  if (pool == 0) return free_blocks_;
  auto it = pools_.find(pool);
  return it != pools_.end() ? it->second : free_blocks_;  // a released pool's blocks come home
}

std::shared_ptr<CachingAllocator::CapturePool> CachingAllocator::begin_capture_pool() {
  std::lock_guard lock(mutex_);
  const auto [it, inserted] = capturing_.emplace(std::this_thread::get_id(), next_pool_);
  LS_CHECK(inserted, "begin_capture_pool: this thread is capturing already; end that capture "
                     "first (captures do not nest)");
  pools_.emplace(next_pool_, FreeLists{});
  return std::make_shared<CapturePool>(*this, next_pool_++);
}

void CachingAllocator::end_capture_pool() {
  std::lock_guard lock(mutex_);
  capturing_.erase(std::this_thread::get_id());
}

void CachingAllocator::release_pool(uint64_t pool) {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  for (auto& [size, blocks] : it->second) {
    auto& home = free_blocks_[size];
    home.insert(home.end(), blocks.begin(), blocks.end());
  }
  pools_.erase(it);
  std::erase_if(capturing_, [&](const auto& entry) { return entry.second == pool; });
}

void* CachingAllocator::take_cached_locked(uint64_t pool, size_t size) {
  for (FreeLists* lists : {&free_lists_locked(pool), &free_blocks_}) {
    auto it = lists->find(size);
    if (it == lists->end() || it->second.empty()) continue;
    void* ptr = it->second.back();
    it->second.pop_back();
    return ptr;
  }
  return nullptr;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  void* ptr = nullptr;
  uint64_t pool = 0;
  if (!capturing_.empty()) {
    auto capture = capturing_.find(std::this_thread::get_id());
    if (capture != capturing_.end()) pool = capture->second;
  }
  // A capture takes from its pool's blocks first, then from the allocator's own cache (free in
  // stream order like any cached block; the pool keeps it until the graph goes), so capturing a
  // step after eager warm-up steps needs little new memory.
  ptr = take_cached_locked(pool, size);
  if (ptr != nullptr) {
    ++stats_.cache_hits;
  } else {
    ptr = raw_alloc_(size);
    // Out of memory: give every cached block back and try once more before failing, where that
    // is safe (Note [Out of memory while peers communicate]). Not while this thread captures a
    // graph: a CUDA capture forbids freeing device memory.
    if (ptr == nullptr && pool != 0) {
      LS_THROW("out of memory while capturing a step as a graph: could not allocate ", size,
               " bytes (", stats_.bytes_in_use, " bytes in use by tensors, ", stats_.bytes_reserved,
               " reserved); use a smaller batch, or turn graphs off");
    }
    if (ptr == nullptr && on_oom_ == OnOutOfMemory::kFail) {
      int64_t cached = 0;
      for (const auto& [cached_size, blocks] : free_blocks_)
        cached += static_cast<int64_t>(cached_size * blocks.size());
      LS_THROW("out of memory: could not allocate ", size,
                  " bytes (", stats_.bytes_in_use, " bytes in use by tensors, ",
                  stats_.bytes_reserved, " reserved, of which ", cached,
                  " cached in blocks of other sizes, kept: freeing them could hang the "
                  "collectives in flight); use a smaller batch or model, or shard it "
                  "(--shard, --pipeline)");
    }
    if (ptr == nullptr) {
      for (auto& [cached_size, blocks] : free_blocks_) {
        for (void* block : blocks) raw_free_(block), ++stats_.system_frees;
        stats_.bytes_reserved -= static_cast<int64_t>(cached_size * blocks.size());
      }
      free_blocks_.clear();
      ptr = raw_alloc_(size);
    }
    LS_CHECK(ptr != nullptr, "out of memory: could not allocate ", size, " bytes (",
             stats_.bytes_in_use, " bytes in use by tensors, ", stats_.bytes_reserved,
             " reserved); use a smaller batch or model");
    ++stats_.system_allocs;
    stats_.bytes_reserved += static_cast<int64_t>(size);
  }
  live_blocks_.emplace(ptr, LiveBlock{size, pool});
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  LS_ASSERT(it != live_blocks_.end(), "free of a pointer this allocator did not hand out");
  free_lists_locked(it->second.pool)[it->second.size].push_back(ptr);
  stats_.bytes_in_use -= static_cast<int64_t>(it->second.size);
  live_blocks_.erase(it);
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* block : blocks) {
      raw_free_(block);
      ++stats_.system_frees;
      stats_.bytes_reserved -= static_cast<int64_t>(size);
    }
  }
  free_blocks_.clear();
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::optional<AllocatorStats> CachingAllocator::try_stats() const {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return stats_;
}

}  // namespace ls
