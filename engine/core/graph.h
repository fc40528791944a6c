// StreamGraph: a step's device work captured once and launched again as one unit (issue 12:
// the whole step as a graph). CUDA: a cudaGraphExec_t from stream capture. Host backend: the
// list of work its streams were handed during capture, handed to them again at each launch, so
// the control path of graphs (capture, private memory, replay, fallback) runs and is tested on
// machines with no GPU.
//
// Capture (DeviceRuntime::begin_capture / end_capture, engine/core/runtime.h): from
// begin_capture(origin, joined) until end_capture(origin), work enqueued on `origin` and on the
// `joined` streams is recorded, not run. CUDA captures in cudaStreamCaptureModeThreadLocal mode
// (each replica's thread captures its own streams, as NCCL requires for graphs with one thread
// per GPU); a joined stream enters the capture by waiting on an event recorded on a capturing
// stream, and must be joined back into `origin` (origin waits on an event recorded on it) before
// end_capture. Memory the capturing thread allocates meanwhile comes from a pool private to the
// graph (CachingAllocator::begin_capture_pool): a launch writes where the capture's kernels
// were told to write, so that memory stays the graph's until the graph is destroyed.
// What a graph bakes in: kernel arguments (pointers, sizes, host scalars such as the optimizer's
// learning rate). Values that change between launches must be read from device memory
// (ops/step_control.h); shapes must not change. A model op that reads a per-step host value
// (ForwardContext::step, seed, first_row) must call Tape::note_step_dependent(), as dropout
// does, or its graph launches would repeat the captured step's value.
// Thread-safety: a graph is launched by one thread at a time, on the thread that owns its streams.
#pragma once

#include <cstdint>

#include <lockstep/stream.h>

namespace ls {

class StreamGraph {
 public:
  virtual ~StreamGraph() = default;
  // Enqueues the captured work on the streams it was captured from (origin: the stream the
  // capture began on), ordered after the work enqueued on origin before this call.
  virtual void launch(Stream& origin) = 0;
  // Nodes of the graph: kernels, copies, collectives, event records and waits. A launch is one
  // call for the host thread however many nodes it holds (CUDA: one cudaGraphLaunch).
  virtual int64_t nodes() const = 0;
};

}  // namespace ls
