// The CUDA runtime API of the CPU emulator (LOCKSTEP_CUDA=EMULATED): the types, error codes and
// functions lockstep's CUDA sources call, with the toolkit's names and values, implemented in
// engine/core/cuda_emulator/runtime.cpp. Device memory is host memory; a stream runs its work
// at enqueue on the calling thread, so queries always succeed. Graph capture is not emulated
// (cudaStreamBeginCapture returns cudaErrorStreamCaptureUnsupported). Not the toolkit's header:
// only what lockstep uses is here; add a name when a CUDA source starts using it.
#pragma once

#include <cstddef>
#include <cstdint>

// ---- vector types (vector_types.h) -----------------------------------------------------------
// The vector type kernels load 16 bytes at a time with (aligned as CUDA aligns it).
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x = 1, y = 1, z = 1;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: implicit, as in CUDA
};

// ---- errors (driver_types.h; the toolkit's values) ---------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorPeerAccessNotEnabled = 705,
  cudaErrorContextIsDestroyed = 709,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotPermitted = 800,
  cudaErrorNotSupported = 801,
  cudaErrorSystemDriverMismatch = 803,
  cudaErrorCompatNotSupportedOnDevice = 804,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorUnknown = 999,
};

// ---- handles and enums ------------------------------------------------------------------------
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUgraphNode_st* cudaGraphNode_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
};

struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void* devicePointer = nullptr;
  void* hostPointer = nullptr;
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
  int maxThreadsPerBlock;
  size_t sharedMemPerBlock;
  int warpSize;
};

inline constexpr unsigned int cudaStreamDefault = 0x0;
inline constexpr unsigned int cudaStreamNonBlocking = 0x1;
inline constexpr unsigned int cudaEventDefault = 0x0;
inline constexpr unsigned int cudaEventDisableTiming = 0x2;
inline constexpr unsigned int cudaEventRecordExternal = 0x1;
inline constexpr unsigned int cudaHostAllocDefault = 0x0;
inline constexpr unsigned int cudaHostAllocPortable = 0x1;
inline constexpr unsigned int cudaHostAllocMapped = 0x2;

// ---- functions --------------------------------------------------------------------------------
// Errors: the last error is per thread; a failed call sets it, cudaGetLastError reads and
// clears it. cudaErrorLaunchFailure's text names the kernel, block and cause of the last failed
// launch on this thread (engine/core/cuda_emulator/executor.cpp).
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);

// Devices: as many as the environment variable LOCKSTEP_EMULATED_GPUS says (default 0, so an
// emulated build sees no GPU unless asked). The current device is per thread, 0 at first.
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device);
cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags);
cudaError_t cudaDeviceDisablePeerAccess(int peer);
cudaError_t cudaDriverGetVersion(int* version);
// No driver: every symbol is "not found" (DeviceGuard then relies on what lockstep bound).
enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};
enum : unsigned long long { cudaEnableDefault = 0 };
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status);
cudaError_t cudaRuntimeGetVersion(int* version);

// Memory: cudaMalloc counts against the device's limit (LOCKSTEP_EMULATED_GPU_MEMORY bytes,
// default 16 GiB; ls::cuda_emu::set_memory_limit) and fails with cudaErrorMemoryAllocation past it.
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = nullptr);

// Streams and events: work runs at enqueue, so every query answers cudaSuccess.
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Graphs: not emulated. Capture is refused; nothing is ever capturing.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
