// What the host kernels of every op family share: the chunk size of streaming kernels and
// enqueue_map, which runs an element-wise body over [0, n) on the stream's worker.
// Host kernels capture pointers and sizes by value and return at once; the buffers must stay
// valid until the stream has run the work. Work is split with host_parallel_for over the host
// device's cores; every reduction sums in a fixed order, so results do not depend on chunking.
#pragma once

#include <cstdint>

#include "engine/core/host/host_device.h"

namespace ls {

// Elements per host_parallel_for chunk for streaming kernels: large enough that the per-chunk
// overhead is negligible, small enough that a 1M-element tensor spreads over 64 cores.
inline constexpr int64_t kHostGrain = 16 * 1024;

// Runs body(begin, end) over [0, n) in chunks of kHostGrain elements on the stream's worker.
template <typename Body>
void enqueue_map(Stream& stream, int64_t n, Body body) {
  if (n <= 0) return;
  host_enqueue(stream, [n, body] { host_parallel_for(0, n, kHostGrain, body); });
}

}  // namespace ls
