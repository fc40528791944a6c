// What host kernels need from the host backend: a way to enqueue work on a host stream and a
// parallel loop that runs inside the device's own oneTBB arena.
//
// host_enqueue(stream, fn): fn runs later on the stream's worker thread, in order. An exception
// thrown by fn becomes the stream's pending error (see lockstep/stream.h).
// host_parallel_for(begin, end, grain, body): called from inside enqueued work; splits
// [begin, end) into chunks of at least `grain` and runs body(chunk_begin, chunk_end) on the
// cores of the current host device (all inline when the device has one core). Chunk
// boundaries depend only on (begin, end, grain, threads), never on timing, so a kernel that
// reduces per chunk and then combines the chunks in order is deterministic.
#pragma once

#include <cstdint>
#include <functional>

#include <lockstep/stream.h>

namespace ls {

void host_enqueue(Stream& stream, std::function<void()> work);

// The number of cores the current host device's kernels may use (1 outside host stream work).
int host_current_threads();

void host_parallel_for(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body);

}  // namespace ls
