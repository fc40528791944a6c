// Graph capture on the CUDA backend (engine/core/graph.h): CudaRuntime's begin_capture /
// end_capture / capturing are these functions plus the map of captures in progress. A capture
// is cudaStreamBeginCapture in cudaStreamCaptureModeThreadLocal mode on the origin stream, with
// the calling thread's allocations in a pool of its own; end_cuda_capture instantiates the graph
// and hands it that pool. A capture that fails ends cleanly (stream out of capture, pool ended)
// and throws ls::Error; the engine then keeps running eager steps.
//
// Note [Events recorded during capture]
// cudaEventRecord on a capturing stream runs nothing: the capture turns the record and the
// cudaStreamWaitEvent calls on it into edges of the graph (no node, unless recorded with
// cudaEventRecordExternal). The event is then "last recorded in a capturing stream", and
// cudaEventQuery, cudaEventSynchronize and cudaEventElapsedTime on it fail with
// cudaErrorCapturedEvent (907) — in every capture mode, since such calls "necessarily conflict
// with stream capture" (cudaThreadExchangeStreamCaptureMode's documentation). Launching the graph
// does not record it either, so it stays that way until it is recorded on a stream that is not
// capturing. So the flight recorder and the bucket timeline must not query or time events that
// were recorded inside a captured step (during the capture or after); time a graph step with
// events recorded on the origin stream around launch(). Waiting on an event recorded before the
// capture from a capturing stream would make a dependency across the capture's boundary
// (cudaErrorStreamCaptureIsolation): every event a captured step waits on is recorded inside it.
// Thread-safety: begin and end of one capture run on one thread (ThreadLocal mode requires it).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include <lockstep/allocator.h>
#include <lockstep/device.h>
#include "engine/core/graph.h"

namespace ls {

using CapturePoolHandle = std::shared_ptr<CachingAllocator::CapturePool>;

// Starts capturing `origin` and routes the calling thread's allocations from `allocator` to a new
// pool, which it returns. On failure nothing is left capturing and the error is raised.
CapturePoolHandle begin_cuda_capture(Device device, cudaStream_t origin,
                                     CachingAllocator& allocator);

// Ends the capture begun on `origin` by this thread and instantiates it; the graph holds `pool`.
// Raises ls::Error (the stream out of capture, the pool ended) when the capture was invalidated
// or the graph cannot be instantiated.
std::unique_ptr<StreamGraph> end_cuda_capture(Device device, cudaStream_t origin,
                                              CachingAllocator& allocator, CapturePoolHandle pool);

// True while `stream` is in a capture sequence (active, or invalidated and not yet ended).
bool cuda_stream_capturing(cudaStream_t stream);

}  // namespace ls
