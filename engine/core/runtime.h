// The per-device runtime: a backend's streams, events, memory and copies behind one interface.
//
// device_runtime(d) returns the process-wide runtime of device d, created on first use.
// Backends: engine/core/host/ (worker-thread streams) and engine/core/cuda/ (CUDA streams). Code above this
// layer never names a backend.
// Thread-safety: device_runtime() and every method may be called from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <lockstep/allocator.h>
#include <lockstep/device.h>
#include "engine/core/graph.h"
#include <lockstep/stream.h>

namespace ls {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual Device device() const = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // An event only recorded, waited for and queried, never timed (elapsed_ms_since refuses it):
  // on CUDA made with cudaEventDisableTiming, which CUDA records and waits on more cheaply.
  virtual std::unique_ptr<Event> create_sync_event() { return create_event(); }
  // Copies `bytes` between any two places that are host memory or memory of this device, in
  // stream order. Both buffers must stay valid until the stream has run the copy.
  virtual void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  virtual CachingAllocator& allocator() = 0;
  // Makes this device current for the calling thread (cudaSetDevice; nothing on the host). Every
  // thread that drives a device calls it first: CUDA's current device is per thread.
  virtual void bind_current_thread() {}
  // Lets this device's copies read and write `peer`'s memory directly where the hardware allows
  // (CUDA: cudaDeviceEnablePeerAccess when cudaDeviceCanAccessPeer says yes; "already enabled"
  // counts as done). Where it does not, copies between the two still work, staged by the driver.
  // Nothing on the host. Call it once, before the steps (the driver may synchronize).
  virtual void enable_peer_access(Device peer) { (void)peer; }

  // Host memory the device copies to and from without the host waiting for the copy (CUDA:
  // page-locked, from cudaHostAlloc: a copy into pageable memory would make the host wait; host
  // backend: ordinary aligned memory). For staging a step's inputs and outcome. CUDA never
  // returns such memory to the system while the process lives (cudaFreeHost synchronizes the
  // device, which can hang behind a stuck collective): freed blocks are kept for reuse.
  virtual void* allocate_pinned(size_t bytes);
  virtual void free_pinned(void* ptr);

  // Graph capture (engine/core/graph.h). begin_capture: work enqueued on `origin` and `joined`
  // is recorded from now on (CUDA: joined streams enter by waiting on a captured event), and the
  // calling thread's allocations come from a new pool private to the graph. end_capture: the
  // graph, owning that pool. A capture that fails leaves the streams out of capture and throws.
  virtual void begin_capture(Stream& origin, const std::vector<Stream*>& joined) = 0;
  virtual std::unique_ptr<StreamGraph> end_capture(Stream& origin) = 0;
  // True while `stream` is being captured.
  virtual bool capturing(const Stream& stream) const = 0;
  // While `stream` is captured by a backend whose graphs cannot hold a collective by themselves
  // (the host backend), records `call` (which enqueues a collective on the stream) to be made
  // again at the same point of each launch, and returns true. False otherwise: then the caller
  // makes the call now (CUDA: NCCL's kernels are captured like any other).
  virtual bool capture_call(Stream& /*stream*/, std::function<void()> /*call*/) { return false; }
};

DeviceRuntime& device_runtime(Device device);

// set_host_threads_per_device / host_threads_per_device: lockstep/device.h.

// Backend factories, one per backend file that is compiled in.
std::unique_ptr<DeviceRuntime> make_host_runtime(Device device);
std::unique_ptr<DeviceRuntime> make_cuda_runtime(Device device);

}  // namespace ls
