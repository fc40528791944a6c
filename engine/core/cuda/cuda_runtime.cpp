// The CUDA backend of DeviceRuntime: CudaStream (a non-blocking cudaStream_t), CudaEvent (a
// timing-capable cudaEvent_t), copies through cudaMemcpyAsync and a caching allocator over
// cudaMalloc/cudaFree; plus cuda_availability(), which says why no GPU is usable.
// Every method makes its device current first (DeviceGuard). Waits poll cudaStreamQuery /
// cudaEventQuery with short sleeps instead of blocking in the driver, so Stream::abort() from
// another thread ends them ("stream aborted"). After abort a stream takes no new work.
// Graph capture: engine/core/cuda/cuda_graph.h; a capturing stream refuses synchronize() and
// check() (a host wait would invalidate the capture), and events recorded during a capture
// cannot be queried or timed (Note [Events recorded during capture]).
// Thread-safety: as lockstep/stream.h and engine/core/runtime.h say.
#include "engine/core/cuda/cuda_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "engine/core/cuda/cuda_check.h"
#include "engine/core/cuda/cuda_graph.h"
#include "engine/core/cuda/cuda_stream_access.h"
#include <lockstep/device.h>
#include "engine/core/device_fault.h"
#include "engine/core/runtime.h"

namespace ls {

// ---- DeviceGuard: See Note [Bind before any device state] -----------------------------------

namespace {
thread_local int t_bound_device = -1;  // what lockstep last made current on this thread

// The device the calling thread really has current, or -1 when it has none.
int current_device_or_none() noexcept {
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  if (current == t_bound_device || current != 0) return current;
  return cuda_primary_context_active(0) ? 0 : -1;
}
}  // namespace

bool cuda_primary_context_active(int device) noexcept {
  using GetState = int (*)(int device, unsigned int* flags, int* active);  // CUresult, CUdevice
  static const GetState get_state = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000,
                                         cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return GetState{nullptr};
    }
    return reinterpret_cast<GetState>(fn);
  }();
  unsigned int flags = 0;
  int active = 0;
  return get_state != nullptr && get_state(device, &flags, &active) == 0 && active != 0;
}

void bind_cuda_device(int device) {
  LS_CUDA_CHECK(cudaSetDevice(device));
  t_bound_device = device;
}

DeviceGuard::DeviceGuard(int device) : device_(device), previous_(current_device_or_none()) {
  if (previous_ != device_) bind_cuda_device(device_);
}

DeviceGuard::DeviceGuard(int device, std::nothrow_t) noexcept
    : device_(device), previous_(current_device_or_none()) {
  if (previous_ == device_) return;
  if (cudaSetDevice(device_) == cudaSuccess) {
    t_bound_device = device_;
  } else {
    (void)cudaGetLastError();
    previous_ = device_;  // nothing changed, nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0 || previous_ == device_) return;  // a thread with none keeps ours
  if (cudaSetDevice(previous_) == cudaSuccess) {  // best effort: destructors must not throw
    t_bound_device = previous_;
  } else {
    (void)cudaGetLastError();
  }
}
namespace {

using AbortFlag = std::shared_ptr<std::atomic<bool>>;

// cudaStreamQuery / cudaEventQuery report "still running" as cudaErrorNotReady, which the
// runtime may also leave as the thread's last error; clear it so that the next launch check
// (cudaGetLastError) does not report it.
cudaError_t query_status(cudaError_t status) {
  if (status == cudaErrorNotReady) (void)cudaGetLastError();
  return status;
}

// Polls `query` until it returns cudaSuccess. Spins (yielding) for the first 100 us, which
// covers most waits at the end of a step, then sleeps 20 us between polls. Ends with an error
// when the query fails or `aborted` (may be null) is set.
template <typename Query>
void poll_until_done(Query query, const std::atomic<bool>* aborted, const char* what,
                     Device device) {
  using namespace std::chrono_literals;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (aborted != nullptr && aborted->load(std::memory_order_acquire)) {
      LS_THROW_AS(ErrorKind::kAborted, what, " on ", device.str(), " ended: stream aborted");
    }
    const cudaError_t status = query_status(query());
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) {
      LS_THROW(what, " on ", device.str(), " failed: ", detail::describe_cuda_error(status));
    }
    if (std::chrono::steady_clock::now() - start < 100us) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(20us);
    }
  }
}

// An event recorded on a capturing stream cannot be queried, synchronized or timed, during the
// capture or after it: those calls fail with cudaErrorCapturedEvent, whose message says so. See
// Note [Events recorded during capture] (engine/core/cuda/cuda_graph.h).
class CudaEvent final : public Event {
 public:
  CudaEvent(Device device, bool timing) : device_(device), timing_(timing) {
    DeviceGuard guard(device_.index);
    LS_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault
                                                           : cudaEventDisableTiming));
  }
  ~CudaEvent() override {
    DeviceGuard guard(device_.index, std::nothrow);
    if (event_ != nullptr) cudaEventDestroy(event_);  // fine while pending: freed when done
  }

  Device device() const override { return device_; }

  bool query() const override {
    DeviceGuard guard(device_.index);
    const cudaError_t status = query_status(cudaEventQuery(event_));
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) return false;
    LS_THROW("event query on ", device_.str(), " failed: ", detail::describe_cuda_error(status));
  }

  // Bounded by the abort of the stream the event was last recorded on.
  void synchronize() const override {
    DeviceGuard guard(device_.index);
    AbortFlag aborted = recorded_on();
    poll_until_done([this] { return cudaEventQuery(event_); }, aborted.get(), "event synchronize",
                    device_);
  }

  double elapsed_ms_since(const Event& start) const override {
    const auto* begin = dynamic_cast<const CudaEvent*>(&start);
    LS_CHECK(begin != nullptr, "elapsed_ms_since: the start event is a ", start.device().str(),
             " event, but this one is on ", device_.str(), "; time events of one device");
    LS_CHECK(begin->device_ == device_, "elapsed_ms_since: events on ", begin->device_.str(),
             " and ", device_.str(), "; time events of one device");
    LS_CHECK(timing_ && begin->timing_, "elapsed_ms_since on ", device_.str(),
             ": a synchronisation event (DeviceRuntime::create_sync_event) cannot be timed; "
             "make both with create_event()");
    DeviceGuard guard(device_.index);
    float ms = 0.0f;
    const cudaError_t status = cudaEventElapsedTime(&ms, begin->event_, event_);
    // These errors are not sticky: clear them so that the next launch check does not report them.
    if (status != cudaSuccess) (void)cudaGetLastError();
    LS_CHECK(status != cudaErrorNotReady, "elapsed_ms_since on ", device_.str(),
             ": an event has not completed yet; synchronize() the later event first");
    LS_CHECK(status != cudaErrorInvalidResourceHandle, "elapsed_ms_since on ", device_.str(),
             ": both events must have been recorded on a stream");
    if (status != cudaSuccess) {
      LS_THROW("elapsed_ms_since on ", device_.str(),
               " failed: ", detail::describe_cuda_error(status));
    }
    return static_cast<double>(ms);
  }

  cudaEvent_t handle() const { return event_; }

  void set_recorded_on(AbortFlag aborted) {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded_on_ = std::move(aborted);
  }

 private:
  AbortFlag recorded_on() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return recorded_on_;
  }

  Device device_;
  bool timing_;
  cudaEvent_t event_ = nullptr;
  mutable std::mutex mutex_;  // guards recorded_on_ (record and synchronize may race)
  AbortFlag recorded_on_;     // abort flag of the stream of the last record(); null before
};

// E is Event or const Event; the result has the same constness.
template <typename E>
auto& as_cuda_event(E& event, const char* what, Device stream_device) {
  using Target = std::conditional_t<std::is_const_v<E>, const CudaEvent, CudaEvent>;
  auto* cuda_event = dynamic_cast<Target*>(&event);
  LS_CHECK(cuda_event != nullptr, what, ": a stream on ", stream_device.str(),
           " cannot use an event of ", event.device().str(), "; create events with device_runtime(",
           stream_device.str(), ").create_event()");
  return *cuda_event;
}

// Note [Fault records are pooled]
// Each CudaStream has a DeviceFault in mapped pinned host memory that its kernels write bad
// input to (engine/core/device_fault.h). Records come from a process-wide pool and go back to
// it, never to cudaFreeHost: freeing pinned memory synchronizes the device, which can hang
// behind a stuck NCCL kernel while a failed run is torn down. A record is reset on reuse. The
// pool holds at most as many records as streams ever existed at once.
struct FaultRecordPool {
  std::mutex mutex;
  std::vector<DeviceFault*> free;
};

FaultRecordPool& fault_record_pool() {
  static auto* pool = new FaultRecordPool();  // never destroyed: streams may outlive statics
  return *pool;
}

DeviceFault* acquire_fault_record() {
  FaultRecordPool& pool = fault_record_pool();
  {
    std::lock_guard lock(pool.mutex);
    if (!pool.free.empty()) {
      DeviceFault* record = pool.free.back();
      pool.free.pop_back();
      *record = DeviceFault{};
      return record;
    }
  }
  void* memory = nullptr;
  LS_CUDA_CHECK(cudaHostAlloc(&memory, sizeof(DeviceFault),
                              cudaHostAllocMapped | cudaHostAllocPortable));
  return new (memory) DeviceFault{};
}

void release_fault_record(DeviceFault* record) noexcept {
  if (record == nullptr) return;
  FaultRecordPool& pool = fault_record_pool();
  std::lock_guard lock(pool.mutex);
  pool.free.push_back(record);
}

class CudaStream final : public Stream {
 public:
  explicit CudaStream(Device device)
      : device_(device), aborted_(std::make_shared<std::atomic<bool>>(false)) {
    DeviceGuard guard(device_.index);
    LS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    fault_ = acquire_fault_record();
  }
  // cudaStreamDestroy returns at once; pending work still runs and the stream is freed after.
  // The fault record goes back to the pool (see acquire_fault_record).
  ~CudaStream() override {
    DeviceGuard guard(device_.index, std::nothrow);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    release_fault_record(fault_);
  }

  Device device() const override { return device_; }

  void record(Event& event) override {
    CudaEvent& cuda_event = as_cuda_event(event, "record", device_);
    LS_CHECK(cuda_event.device() == device_, "record: an event of ", cuda_event.device().str(),
             " cannot be recorded on a stream of ", device_.str(),
             " (CUDA events are recorded on streams of their own device)");
    throw_if_aborted("record");
    DeviceGuard guard(device_.index);
    LS_CUDA_CHECK(cudaEventRecord(cuda_event.handle(), stream_));
    cuda_event.set_recorded_on(aborted_);
  }

  // The event may belong to another CUDA device: cudaStreamWaitEvent synchronises across them.
  void wait(const Event& event) override {
    const CudaEvent& cuda_event = as_cuda_event(event, "wait", device_);
    throw_if_aborted("wait");
    DeviceGuard guard(device_.index);
    LS_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda_event.handle(), 0));
  }

  void synchronize() override {
    DeviceGuard guard(device_.index);
    throw_if_capturing("stream synchronize");
    poll_until_done([this] { return cudaStreamQuery(stream_); }, aborted_.get(),
                    "stream synchronize", device_);
    raise_device_fault();
  }

  void check() override {
    throw_if_aborted("check");
    DeviceGuard guard(device_.index);
    throw_if_capturing("stream check");
    const cudaError_t status = query_status(cudaStreamQuery(stream_));
    if (status != cudaSuccess && status != cudaErrorNotReady) {
      LS_THROW("stream on ", device_.str(), " failed: ", detail::describe_cuda_error(status));
    }
    if (status == cudaSuccess) raise_device_fault();  // idle: the record is complete
  }

  DeviceFault* fault() const { return fault_; }

  // CUDA cannot cancel enqueued kernels: abort ends every wait on this stream (and on events
  // recorded on it) with an error, and refuses new work, so the owning thread unwinds.
  void abort() override { aborted_->store(true, std::memory_order_release); }

  cudaStream_t handle() const {
    throw_if_aborted("enqueue");
    return stream_;
  }
  // The handle even after abort, for questions that enqueue nothing (capturing()).
  cudaStream_t handle_for_query() const { return stream_; }

 private:
  // cudaStreamQuery or a wait on a capturing stream is illegal and invalidates the whole capture,
  // so refuse before asking CUDA anything else.
  void throw_if_capturing(const char* what) const {
    LS_CHECK(!cuda_stream_capturing(stream_), what, " on ", device_.str(),
             ": the stream is being captured into a graph, and waiting for it (or querying it) "
             "would invalidate the capture; wait after end_capture, or keep host waits out of "
             "the captured step");
  }

  void throw_if_aborted(const char* what) const {
    if (aborted_->load(std::memory_order_acquire)) {
      LS_THROW_AS(ErrorKind::kAborted, what, " on ", device_.str(), ": stream aborted");
    }
  }

  // Raises, once, the bad input a kernel recorded (call only when the stream is idle).
  void raise_device_fault() {
    if (fault_->raised == 0) return;
    const DeviceFault found = *fault_;
    *fault_ = DeviceFault{};
    LS_THROW(describe_fault(found));
  }

  Device device_;
  cudaStream_t stream_ = nullptr;
  AbortFlag aborted_;
  DeviceFault* fault_ = nullptr;  // mapped host memory, written by kernels
};

// Returns null when the device is out of memory, so that the caching allocator can release its
// cached blocks and retry (engine/core/allocator.cpp); other failures raise ls::Error.
// Note [cudaMalloc during graph capture]
// A thread capturing in ThreadLocal mode may not call cudaMalloc: the capture does not record it,
// so a graph that relied on it being replayed would be wrong. Ours never does: the block belongs
// to the graph's pool (lockstep/allocator.h) and keeps its address for every launch. So the
// allocation switches this thread to relaxed mode for the call, as PyTorch's caching allocator
// does (cudaMallocMaybeCapturing). A no-op outside a capture.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { ok_ = cudaThreadExchangeStreamCaptureMode(&mode_) == cudaSuccess; }
  ~RelaxedCaptureMode() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;  // then: the mode to restore
  bool ok_ = false;
};

void* cuda_raw_alloc(int index, size_t bytes) {
  DeviceGuard guard(index);
  void* ptr = nullptr;
  const RelaxedCaptureMode relaxed;  // See Note [cudaMalloc during graph capture].
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaSuccess) return ptr;
  (void)cudaGetLastError();  // an allocation failure is not sticky; don't let it linger
  if (status == cudaErrorMemoryAllocation) return nullptr;
  LS_THROW("cudaMalloc of ", bytes, " bytes on cuda:", index,
           " failed: ", detail::describe_cuda_error(status));
}

// Never throws: it runs from destructors, possibly at process exit after CUDA has unloaded.
void cuda_raw_free(int index, void* ptr) noexcept {
  DeviceGuard guard(index, std::nothrow);
  const cudaError_t status = cudaFree(ptr);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    if (status != cudaErrorCudartUnloading && status != cudaErrorContextIsDestroyed) {
      std::fprintf(stderr, "lockstep: cudaFree on cuda:%d failed: %s (%s)\n", index,
                   cudaGetErrorName(status), cudaGetErrorString(status));
    }
  }
}

// Note [Copies into pageable host memory]
// cudaMemcpyAsync into pageable (not pinned) host memory returns only after the copy is done, so
// the calling thread blocks inside the driver until the stream has run all earlier work: a wait
// that nothing can abort if that work hangs (a stuck NCCL kernel). Such copies therefore first
// wait with the stream's own abortable synchronize(); the copy then finds the stream idle.
bool is_pageable(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // older drivers report plain host memory as an error
    return true;
  }
  return attributes.type == cudaMemoryTypeUnregistered;
}

// Page-locked host memory for staging (DeviceRuntime::allocate_pinned), shared by every device
// (cudaHostAllocPortable). Blocks are cached and handed out again, never given back: cudaFreeHost
// synchronizes the device, which can hang behind a stuck collective.
CachingAllocator& pinned_host_allocator() {
  static auto* allocator = new CachingAllocator(  // never destroyed: threads may outlive statics
      [](size_t bytes) -> void* {
        void* ptr = nullptr;
        if (cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable) != cudaSuccess) {
          (void)cudaGetLastError();
          return nullptr;
        }
        return ptr;
      },
      [](void*) {},  // kept (see above)
      CachingAllocator::OnOutOfMemory::kFail);
  return *allocator;
}

class CudaRuntime final : public DeviceRuntime {
 public:
  explicit CudaRuntime(Device device)
      : device_(device),
        allocator_([index = device.index](size_t bytes) { return cuda_raw_alloc(index, bytes); },
                   [index = device.index](void* ptr) { cuda_raw_free(index, ptr); },
                   CachingAllocator::OnOutOfMemory::kFail) {}

  Device device() const override { return device_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CudaStream>(device_); }
  std::unique_ptr<Event> create_event() override {
    return std::make_unique<CudaEvent>(device_, /*timing=*/true);
  }
  std::unique_ptr<Event> create_sync_event() override {
    return std::make_unique<CudaEvent>(device_, /*timing=*/false);
  }

  // cudaMemcpyDefault infers the direction from the pointers (unified addressing). Copies from
  // pageable host memory are staged by the driver; the source may be reused once this returns.
  // See Note [Copies into pageable host memory].
  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    if (bytes == 0) return;
    LS_CHECK(stream.device() == device_, "copy_async on ", device_.str(), " was given a stream of ",
             stream.device().str());
    cudaStream_t cuda_stream = cuda_stream_of(stream);
    DeviceGuard guard(device_.index);
    if (is_pageable(dst)) stream.synchronize();
    LS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream));
  }

  CachingAllocator& allocator() override { return allocator_; }

  void* allocate_pinned(size_t bytes) override {
    DeviceGuard guard(device_.index);
    return pinned_host_allocator().allocate(bytes);
  }
  void free_pinned(void* ptr) override { pinned_host_allocator().free(ptr); }

  // Also creates the device's primary context if this is the first use (CUDA 12+ semantics).
  void bind_current_thread() override { bind_cuda_device(device_.index); }
  void enable_peer_access(Device peer) override {
    if (!peer.is_cuda() || peer.index == device_.index) return;
    DeviceGuard guard(device_.index);
    int can = 0;
    LS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device_.index, peer.index));
    if (can == 0) return;  // copies are staged through host memory by the driver
    const cudaError_t status = cudaDeviceEnablePeerAccess(peer.index, 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // not sticky, but leave nothing behind
      return;
    }
    LS_CUDA_CHECK(status);
  }

  // engine/core/cuda/cuda_graph.h. The joined streams need nothing here: on CUDA a stream enters
  // the capture by waiting on an event recorded on a capturing stream, as the engine does.
  void begin_capture(Stream& origin, const std::vector<Stream*>& joined) override {
    check_own_stream("begin_capture", origin);
    for (Stream* stream : joined) {
      LS_CHECK(stream != nullptr, "begin_capture on ", device_.str(), ": a joined stream is null");
      check_own_stream("begin_capture (joined stream)", *stream);
    }
    const cudaStream_t stream = cuda_stream_of(origin);
    std::lock_guard lock(captures_mutex_);
    LS_CHECK(!captures_.contains(&origin), "begin_capture on ", device_.str(),
             ": this stream is being captured already; end_capture it first (captures do not "
             "nest)");
    captures_.emplace(&origin, begin_cuda_capture(device_, stream, allocator_));
  }

  std::unique_ptr<StreamGraph> end_capture(Stream& origin) override {
    check_own_stream("end_capture", origin);
    CapturePoolHandle pool;
    {
      std::lock_guard lock(captures_mutex_);
      auto it = captures_.find(&origin);
      LS_CHECK(it != captures_.end(), "end_capture on ", device_.str(),
               ": no capture was begun on this stream; call begin_capture(origin, joined) first");
      pool = std::move(it->second);
      captures_.erase(it);
    }
    // Not cuda_stream_of: an aborted stream must still leave its capture.
    return end_cuda_capture(device_, as_cuda_stream(origin).handle_for_query(), allocator_,
                            std::move(pool));
  }

  bool capturing(const Stream& stream) const override {
    check_own_stream("capturing", stream);
    return cuda_stream_capturing(as_cuda_stream(stream).handle_for_query());
  }

 private:
  static const CudaStream& as_cuda_stream(const Stream& stream) {
    const auto* cuda_stream = dynamic_cast<const CudaStream*>(&stream);
    LS_CHECK(cuda_stream != nullptr, "expected a CUDA stream, got a stream of ",
             stream.device().str());
    return *cuda_stream;
  }

  void check_own_stream(const char* what, const Stream& stream) const {
    LS_CHECK(stream.device() == device_, what, " on ", device_.str(), " was given a stream of ",
             stream.device().str(), "; capture each device's streams through its own runtime");
  }

  Device device_;
  CachingAllocator allocator_;
  std::mutex captures_mutex_;  // begin/end_capture may come from the replicas' threads at once
  std::map<const Stream*, CapturePoolHandle> captures_;  // origin -> its graph's pool
};

std::string cuda_version_str(int version) {  // 13000 -> "13.0"
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string explain_no_device() {
  std::string reason = "no CUDA device found";
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    reason += std::string(" (CUDA_VISIBLE_DEVICES=\"") + visible + "\" may hide them)";
  }
  return reason;
}

// Turns cudaGetDeviceCount's failure into a sentence that says what to do.
std::string explain_unavailable(cudaError_t status) {
  int runtime_version = 0, driver_version = 0;
  (void)cudaRuntimeGetVersion(&runtime_version);
  (void)cudaDriverGetVersion(&driver_version);  // 0 when no driver is loaded
  switch (status) {
    case cudaSuccess:
    case cudaErrorNoDevice:
      return explain_no_device();
    case cudaErrorInsufficientDriver:
      if (driver_version == 0) return "no NVIDIA driver loaded (libcuda.so.1 was not found)";
      return "the NVIDIA driver is too old for CUDA " + cuda_version_str(runtime_version) +
             " (it supports CUDA " + cuda_version_str(driver_version) + "); update the driver";
    case cudaErrorInitializationError:
      return "no NVIDIA driver loaded (CUDA initialization failed)";
    case cudaErrorStubLibrary:
      return "no NVIDIA driver loaded (only the toolkit's stub libcuda.so was found)";
    case cudaErrorSystemDriverMismatch:
      return "the NVIDIA driver's library and kernel module versions differ; reload the driver "
             "or reboot";
    case cudaErrorDevicesUnavailable:
      return "every CUDA device is busy or unavailable (exclusive-process compute mode?)";
    case cudaErrorCompatNotSupportedOnDevice:
      return "the CUDA forward-compatibility driver does not support this GPU; update the driver";
    default:
      return std::string("CUDA initialization failed: ") + cudaGetErrorName(status) + " (" +
             cudaGetErrorString(status) + ")";
  }
}

}  // namespace

cudaStream_t cuda_stream_of(Stream& stream) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  LS_CHECK(cuda_stream != nullptr, "expected a CUDA stream, got a stream of ",
           stream.device().str());
  return cuda_stream->handle();
}

DeviceFault* cuda_fault_of(Stream& stream) {
  auto* cuda_stream = dynamic_cast<CudaStream*>(&stream);
  LS_CHECK(cuda_stream != nullptr, "expected a CUDA stream, got a stream of ",
           stream.device().str());
  return cuda_stream->fault();
}

cudaEvent_t cuda_event_of(const Event& event) {
  const auto* cuda_event = dynamic_cast<const CudaEvent*>(&event);
  LS_CHECK(cuda_event != nullptr, "expected a CUDA event, got an event of ", event.device().str());
  return cuda_event->handle();
}

// Note [Eager module loading]
// With lazy loading (CUDA's default since 12.2) a kernel's module is loaded at its first launch,
// and loading may synchronize the context: a first launch of some kernel on one replica while a
// peer's all-reduce is resident can then wait for a kernel that waits for it (CUDA Programming
// Guide, "Lazy Loading"). lockstep asks for eager loading before its first CUDA call, unless the
// environment says otherwise (CUDA_MODULE_LOADING=LAZY is kept). CUDA reads the variable when
// the driver initialises, so an application that made CUDA calls of its own before lockstep's
// first must set it itself (docs/gpu.md).
void prefer_eager_module_loading() {
  static const bool once = [] { return setenv("CUDA_MODULE_LOADING", "EAGER", 0) == 0; }();
  (void)once;
}

CudaAvailability cuda_availability() {
  prefer_eager_module_loading();
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (status == cudaSuccess && count > 0) return {count, ""};
  return {0, explain_unavailable(status)};
}

bool built_with_cuda() { return true; }

std::unique_ptr<DeviceRuntime> make_cuda_runtime(Device device) {
  LS_CHECK(device.is_cuda(), "make_cuda_runtime needs a cuda device, got ", device.str());
  const CudaAvailability available = cuda_availability();
  LS_CHECK(available.device_count > 0, "cannot use ", device.str(), ": ",
           available.reason_unavailable);
  LS_CHECK(device.index >= 0 && device.index < available.device_count, device.str(),
           " does not exist: this process sees ", available.device_count,
           " CUDA device(s), cuda:0 to cuda:", available.device_count - 1,
           " (CUDA_VISIBLE_DEVICES renumbers them)");
  return std::make_unique<CudaRuntime>(device);
}

}  // namespace ls
