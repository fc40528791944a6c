// The CUDA runtime API of the CPU emulator (LOCKSTEP_CUDA=EMULATED; declared in the shim's
// <cuda_runtime_api.h>). Device memory is aligned host memory, counted against a per-device limit
// so that out-of-memory paths can be tested; new allocations are filled with 0xff bytes (f32 NaN),
// so a kernel that reads memory nobody wrote shows it. Streams and events are records: every
// operation runs at enqueue on the calling thread, so waits and queries succeed at once, and an
// event's time is when it was recorded. Graph capture is refused (not emulated).
// Thread-safety: the allocation tables and handle sets are guarded by one mutex; the last error
// and the current device are per thread, as in CUDA.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "engine/core/cuda_emulator/emulator.h"
#include "engine/core/cuda_emulator/runtime_state.h"

struct CUstream_st {
  int device;
};
struct CUevent_st {
  int device;
  bool recorded = false;
  std::chrono::steady_clock::time_point when;
};

namespace ls::cuda_emu {
namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kAlignment = 256;  // cudaMalloc's guarantee
constexpr size_t kDefaultMemory = size_t{16} << 30;

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local std::string t_launch_failure;
thread_local int t_device = 0;
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

struct Allocation {
  size_t bytes;
  int device;
};

struct State {
  std::mutex mutex;
  std::map<const char*, Allocation> device_memory;  // by base address
  std::set<const void*> pinned;
  std::set<const CUstream_st*> streams;
  std::set<const CUevent_st*> events;
  size_t limit[kMaxDevices];
  size_t in_use[kMaxDevices] = {};
};

size_t default_limit() {
  const char* text = std::getenv("LOCKSTEP_EMULATED_GPU_MEMORY");
  if (text == nullptr || *text == '\0') return kDefaultMemory;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(text, &end, 10);
  return end != nullptr && *end == '\0' ? static_cast<size_t>(bytes) : kDefaultMemory;
}

State& state() {
  static auto* s = [] {  // never destroyed: streams and frees may come after static destructors
    auto* fresh = new State;
    std::fill(std::begin(fresh->limit), std::end(fresh->limit), default_limit());
    return fresh;
  }();
  return *s;
}

bool valid_device(int device) { return device >= 0 && device < detail::device_count(); }

}  // namespace

namespace detail {

cudaError_t fail(cudaError_t error) {
  if (error != cudaSuccess) t_last_error = error;
  return error;
}

void fail_launch(std::string what) {
  t_launch_failure = "unspecified launch failure: " + std::move(what);
  t_last_error = cudaErrorLaunchFailure;
}

int device_count() {
  static const int count = [] {
    const char* text = std::getenv("LOCKSTEP_EMULATED_GPUS");
    if (text == nullptr) return 0;
    const int n = std::atoi(text);
    return std::clamp(n, 0, kMaxDevices);
  }();
  return count;
}

cudaError_t check_current_device(int* device) {
  if (device_count() == 0) return cudaErrorNoDevice;
  if (!valid_device(t_device)) return cudaErrorInvalidDevice;
  *device = t_device;
  return cudaSuccess;
}

int stream_device(cudaStream_t stream) {
  if (stream == nullptr) return valid_device(t_device) ? t_device : -1;
  std::lock_guard lock(state().mutex);
  return state().streams.contains(stream) ? stream->device : -1;
}

}  // namespace detail

void set_memory_limit(int device, size_t bytes) {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard lock(state().mutex);
  state().limit[device] = bytes;
}

size_t memory_limit(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  std::lock_guard lock(state().mutex);
  return state().limit[device];
}

size_t memory_in_use(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  std::lock_guard lock(state().mutex);
  return state().in_use[device];
}

}  // namespace ls::cuda_emu

using ls::cuda_emu::detail::fail;
namespace emu = ls::cuda_emu;

// ---- errors -----------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  const cudaError_t error = emu::t_last_error;
  emu::t_last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return emu::t_last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define LS_EMU_ERROR_NAME(name) \
  case name:                    \
    return #name;
    LS_EMU_ERROR_NAME(cudaSuccess)
    LS_EMU_ERROR_NAME(cudaErrorInvalidValue)
    LS_EMU_ERROR_NAME(cudaErrorMemoryAllocation)
    LS_EMU_ERROR_NAME(cudaErrorInitializationError)
    LS_EMU_ERROR_NAME(cudaErrorCudartUnloading)
    LS_EMU_ERROR_NAME(cudaErrorInvalidConfiguration)
    LS_EMU_ERROR_NAME(cudaErrorInvalidDevicePointer)
    LS_EMU_ERROR_NAME(cudaErrorStubLibrary)
    LS_EMU_ERROR_NAME(cudaErrorInsufficientDriver)
    LS_EMU_ERROR_NAME(cudaErrorDevicesUnavailable)
    LS_EMU_ERROR_NAME(cudaErrorNoDevice)
    LS_EMU_ERROR_NAME(cudaErrorInvalidDevice)
    LS_EMU_ERROR_NAME(cudaErrorInvalidResourceHandle)
    LS_EMU_ERROR_NAME(cudaErrorNotReady)
    LS_EMU_ERROR_NAME(cudaErrorIllegalAddress)
    LS_EMU_ERROR_NAME(cudaErrorPeerAccessAlreadyEnabled)
    LS_EMU_ERROR_NAME(cudaErrorPeerAccessNotEnabled)
    LS_EMU_ERROR_NAME(cudaErrorContextIsDestroyed)
    LS_EMU_ERROR_NAME(cudaErrorLaunchFailure)
    LS_EMU_ERROR_NAME(cudaErrorNotPermitted)
    LS_EMU_ERROR_NAME(cudaErrorNotSupported)
    LS_EMU_ERROR_NAME(cudaErrorSystemDriverMismatch)
    LS_EMU_ERROR_NAME(cudaErrorCompatNotSupportedOnDevice)
    LS_EMU_ERROR_NAME(cudaErrorStreamCaptureUnsupported)
    LS_EMU_ERROR_NAME(cudaErrorStreamCaptureInvalidated)
    LS_EMU_ERROR_NAME(cudaErrorStreamCaptureUnjoined)
    LS_EMU_ERROR_NAME(cudaErrorStreamCaptureIsolation)
    LS_EMU_ERROR_NAME(cudaErrorStreamCaptureImplicit)
    LS_EMU_ERROR_NAME(cudaErrorCapturedEvent)
    LS_EMU_ERROR_NAME(cudaErrorUnknown)
#undef LS_EMU_ERROR_NAME
  }
  return "cudaErrorUnrecognized";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory (emulated device memory limit)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected (CUDA emulator: set LOCKSTEP_EMULATED_GPUS)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure:
      return emu::t_launch_failure.empty() ? "unspecified launch failure"
                                           : emu::t_launch_failure.c_str();
    case cudaErrorNotSupported: return "operation not supported (not emulated)";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing (graphs are not emulated)";
    default: return "an error of the CUDA emulator";
  }
}

// ---- devices ----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emu::detail::device_count();
  return *count == 0 ? fail(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (emu::detail::device_count() == 0) return fail(cudaErrorNoDevice);
  *device = emu::t_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (emu::detail::device_count() == 0) return fail(cudaErrorNoDevice);
  if (!emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  emu::t_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!emu::valid_device(device)) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "lockstep CUDA emulator");
  prop->totalGlobalMem = emu::memory_limit(device);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->warpSize = 32;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (!emu::valid_device(device) || len <= 0) return fail(cudaErrorInvalidDevice);
  std::snprintf(bus_id, static_cast<size_t>(len), "emulated:%02d", device);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
  if (!emu::valid_device(device) || !emu::valid_device(peer)) return fail(cudaErrorInvalidDevice);
  *can_access = device != peer ? 1 : 0;  // one address space
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  return emu::valid_device(peer) ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char*, void** fn, unsigned int,
                                             unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (fn != nullptr) *fn = nullptr;
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  return emu::valid_device(peer) ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = 0;  // no driver
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;  // the API the shim follows
  return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  int device = 0;
  if (const cudaError_t status = emu::detail::check_current_device(&device); status != cudaSuccess)
    return fail(status);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  const size_t rounded = (bytes + emu::kAlignment - 1) / emu::kAlignment * emu::kAlignment;
  emu::State& s = emu::state();
  {
    std::lock_guard lock(s.mutex);
    if (rounded > s.limit[device] - std::min(s.limit[device], s.in_use[device]))
      return fail(cudaErrorMemoryAllocation);
    s.in_use[device] += rounded;
  }
  void* memory = std::aligned_alloc(emu::kAlignment, rounded);
  std::lock_guard lock(s.mutex);
  if (memory == nullptr) {
    s.in_use[device] -= rounded;
    return fail(cudaErrorMemoryAllocation);
  }
  std::memset(memory, 0xff, rounded);  // NaN for f32: reads of unwritten memory show
  s.device_memory[static_cast<const char*>(memory)] = {rounded, device};
  *ptr = memory;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  emu::State& s = emu::state();
  {
    std::lock_guard lock(s.mutex);
    auto it = s.device_memory.find(static_cast<const char*>(ptr));
    if (it == s.device_memory.end()) return fail(cudaErrorInvalidDevicePointer);
    s.in_use[it->second.device] -= it->second.bytes;
    s.device_memory.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  *ptr = std::aligned_alloc(emu::kAlignment,
                            std::max<size_t>(1, (bytes + emu::kAlignment - 1) / emu::kAlignment) *
                                emu::kAlignment);
  if (*ptr == nullptr) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(emu::state().mutex);
  emu::state().pinned.insert(*ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard lock(emu::state().mutex);
    if (emu::state().pinned.erase(ptr) == 0) return fail(cudaErrorInvalidValue);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  *attributes = cudaPointerAttributes{};
  const auto* p = static_cast<const char*>(ptr);
  emu::State& s = emu::state();
  std::lock_guard lock(s.mutex);
  auto it = s.device_memory.upper_bound(p);
  if (it != s.device_memory.begin()) {
    --it;
    if (p < it->first + it->second.bytes) {
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = it->second.device;
      attributes->devicePointer = const_cast<void*>(ptr);
      return cudaSuccess;
    }
  }
  if (s.pinned.contains(ptr)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

namespace {
cudaError_t check_stream(cudaStream_t stream) {
  return emu::detail::stream_device(stream) < 0 ? fail(cudaErrorInvalidResourceHandle)
                                                : cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (bytes != 0) std::memcpy(dst, src, bytes);  // ASan reports overlapping copies
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (const cudaError_t status = check_stream(stream); status != cudaSuccess) return status;
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream) {
  if (!emu::valid_device(dst_device) || !emu::valid_device(src_device))
    return fail(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (bytes != 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t status = check_stream(stream); status != cudaSuccess) return status;
  return cudaMemset(ptr, value, bytes);
}

// ---- streams and events -----------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  int device = 0;
  if (const cudaError_t status = emu::detail::check_current_device(&device); status != cudaSuccess)
    return fail(status);
  *stream = new CUstream_st{device};
  std::lock_guard lock(emu::state().mutex);
  emu::state().streams.insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  {
    std::lock_guard lock(emu::state().mutex);
    if (stream == nullptr || emu::state().streams.erase(stream) == 0)
      return fail(cudaErrorInvalidResourceHandle);
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return check_stream(stream); }
cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return check_stream(stream); }

namespace {
cudaError_t check_event(cudaEvent_t event) {
  std::lock_guard lock(emu::state().mutex);
  return event != nullptr && emu::state().events.contains(event)
             ? cudaSuccess
             : fail(cudaErrorInvalidResourceHandle);
}
}  // namespace

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (const cudaError_t status = check_stream(stream); status != cudaSuccess) return status;
  return check_event(event);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  int device = 0;
  if (const cudaError_t status = emu::detail::check_current_device(&device); status != cudaSuccess)
    return fail(status);
  *event = new CUevent_st{device, false, {}};
  std::lock_guard lock(emu::state().mutex);
  emu::state().events.insert(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard lock(emu::state().mutex);
    if (event == nullptr || emu::state().events.erase(event) == 0)
      return fail(cudaErrorInvalidResourceHandle);
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (const cudaError_t status = check_stream(stream); status != cudaSuccess) return status;
  if (const cudaError_t status = check_event(event); status != cudaSuccess) return status;
  event->when = std::chrono::steady_clock::now();  // the work before it has run
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return check_event(event); }
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return check_event(event); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (check_event(start) != cudaSuccess || check_event(end) != cudaSuccess)
    return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

// ---- graphs: not emulated ---------------------------------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
  return fail(cudaErrorStreamCaptureUnsupported);
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t* graph) {
  *graph = nullptr;
  return fail(cudaErrorStreamCaptureUnsupported);
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return check_stream(stream);
}
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(*mode, emu::t_capture_mode);
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t, unsigned long long) {
  *exec = nullptr;
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaGraphGetNodes(cudaGraph_t, cudaGraphNode_t*, size_t* count) {
  *count = 0;
  return fail(cudaErrorNotSupported);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t, cudaStream_t) { return fail(cudaErrorNotSupported); }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t) { return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t) { return cudaSuccess; }
