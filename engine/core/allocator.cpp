// The caching allocator (see engine/core/allocator.h for the contract).
#include "engine/core/allocator.h"

#include <bit>

#include "engine/core/error.h"

namespace ls {

CachingAllocator::CachingAllocator(RawAlloc raw_alloc, RawFree raw_free)
    : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

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
  size_t quantum = std::bit_ceil(bytes) / 8;
  return (bytes + quantum - 1) / quantum * quantum;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  std::lock_guard lock(mutex_);
  void* ptr = nullptr;
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.cache_hits;
  } else {
    ptr = raw_alloc_(size);
    if (ptr == nullptr) {
      // Out of memory: give every cached block back and try once more before failing.
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
  live_blocks_.emplace(ptr, size);
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  LS_ASSERT(it != live_blocks_.end(), "free of a pointer this allocator did not hand out");
  free_blocks_[it->second].push_back(ptr);
  stats_.bytes_in_use -= static_cast<int64_t>(it->second);
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
