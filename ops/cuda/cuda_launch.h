// Launch helpers shared by the ops/cuda/*.cu files (nvcc, or the host compiler for the CPU
// emulator): CudaLaunch (the stream's device current, its cudaStream_t), the block size, a grid
// size for grid-stride loops, the grid-stride loop itself, LS_LAUNCH, the post-launch check and
// report_out_of_range (bad input seen on the device). Every launch is followed by
// LS_CUDA_CHECK_LAUNCH(), which reports bad configurations at the call site (asynchronous faults
// surface at the next synchronize or check of the stream).
#pragma once

#include <cuda_runtime.h>  // the toolkit's, or the CPU emulator's (LOCKSTEP_CUDA=EMULATED)

#include <algorithm>
#include <cstdint>

#include "engine/core/cuda/cuda_check.h"
#include "engine/core/cuda/cuda_runtime.h"
#include "engine/core/cuda/cuda_stream_access.h"
#include "engine/core/device_fault.h"
#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/stream.h>

namespace ls::cuda_ops {

// While a CudaLaunch lives, the stream's device is current; stream() is its cudaStream_t (an
// error for a stream of another backend, or an aborted one).
class CudaLaunch {
 public:
  explicit CudaLaunch(Stream& stream)
      : stream_ref_(stream),
        device_(checked_index(stream)),
        guard_(device_),
        stream_(cuda_stream_of(stream)) {}
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  DeviceFault* fault() const { return cuda_fault_of(stream_ref_); }

 private:
  static int checked_index(Stream& stream) {
    LS_CHECK(stream.device().is_cuda(), "a CUDA kernel was given a stream of ",
             stream.device().str(), "; call the op of ops/<family>.h, which picks the backend");
    return stream.device().index;
  }

  Stream& stream_ref_;
  int device_;
  DeviceGuard guard_;
  cudaStream_t stream_;
};

// Scratch memory for one op call (partial sums), from the device's caching allocator: no
// cudaMalloc once the cache is warm, and in a graph capture it comes from the graph's pool. Freed
// when the call returns, after its kernels were enqueued: the allocator hands a block out again
// only in stream order (lockstep/allocator.h; a step allocates on one stream per device).
class CudaScratch {
 public:
  CudaScratch(int device, size_t bytes)
      : allocator_(device_runtime(Device{DeviceKind::kCuda, device}).allocator()),
        ptr_(allocator_.allocate(bytes)) {}
  ~CudaScratch() { allocator_.free(ptr_); }
  CudaScratch(const CudaScratch&) = delete;
  CudaScratch& operator=(const CudaScratch&) = delete;
  float* f32() const { return static_cast<float*>(ptr_); }

 private:
  CachingAllocator& allocator_;
  void* ptr_;
};

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops cover the rest.
constexpr int64_t kMaxBlocks = 65535;

inline unsigned int grid_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned int>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

}  // namespace ls::cuda_ops

// for (int64_t i = global thread index; i < n; i += total threads)
#define LS_GRID_STRIDE_LOOP(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

#define LS_CUDA_CHECK_LAUNCH() LS_CUDA_CHECK(cudaGetLastError())

// Fully unrolls the next loop under nvcc: a loop over an array of wmma fragments must be, or the
// array lives in local memory. Nothing for the emulator's host compiler.
#ifdef __CUDACC__
#define LS_UNROLL _Pragma("unroll")
#else
#define LS_UNROLL
#endif

// LS_LAUNCH(kernel, grid, block, shared_bytes, stream, args...): every kernel launch, so the
// kernels keep one source. nvcc: kernel<<<grid, block, shared_bytes, stream>>>(args...). The host
// compiler (LOCKSTEP_CUDA=EMULATED): the CPU emulator runs the grid on the calling thread
// (engine/core/cuda_emulator/emulator.h) and records the launch under the kernel's name.
#ifdef __CUDACC__
#define LS_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
#else
#define LS_LAUNCH(kernel, grid, block, shared_bytes, stream, ...)            \
  ::ls::cuda_emu::launch(                                                    \
      #kernel, grid, block, shared_bytes, stream,                            \
      [](auto... kernel_args) { kernel(kernel_args...); }, __VA_ARGS__)
#endif

#if defined(__CUDACC__) || defined(LOCKSTEP_CUDA_EMULATED)
namespace ls::cuda_ops {
// Records the first out-of-range value in the stream's fault record (first writer wins); the
// stream raises it at its next synchronize(). `site` is from register_fault_site: no string
// crosses to the device (Note [No host pointers through the fault record]).
__device__ inline void report_out_of_range(DeviceFault* fault, int32_t site, int64_t index,
                                           int64_t value, int64_t limit) {
  if (atomicCAS(&fault->raised, 0, 1) != 0) return;
  fault->site = site;
  fault->index = index;
  fault->value = value;
  fault->limit = limit;
  __threadfence_system();
}
}  // namespace ls::cuda_ops
#endif
