// The CPU emulator of CUDA kernels (LOCKSTEP_CUDA=EMULATED): what the shim's <cuda_runtime.h>
// builds the device built-ins on, and what tests ask of it. A launch runs its blocks in turn on
// the calling thread; each CUDA thread of a block is a fiber, and barriers (__syncthreads, warp
// shuffles) switch between them (executor.cpp). A launch that cannot finish (a barrier some
// threads of the block exited without reaching) fails with cudaErrorLaunchFailure, its text
// naming the kernel, the block and the barrier. Kernels launch through LS_LAUNCH
// (ops/cuda/cuda_launch.h), which calls launch() here when not compiled by nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ls::cuda_emu {

// The coordinates of the CUDA thread running on this OS thread (threadIdx and friends).
struct ThreadCoords {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1};
  dim3 grid_dim{1, 1, 1};
};

namespace detail {
// constinit: read without a TLS wrapper call; switched with the running fiber.
extern constinit thread_local ThreadCoords t_coords;

using KernelBody = void (*)(void* context) noexcept;
// Checks the configuration as a GPU does (cudaErrorInvalidConfiguration, left as the thread's
// last error) and runs body(context) once per CUDA thread of every block.
void run_launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                KernelBody body, void* context);
}  // namespace detail

// kernel(args...) for every thread of the grid; `kernel` is called through `body`, a lambda
// that the launch macro writes (so template kernels deduce their arguments as under nvcc).
// The arguments are evaluated once, copied, and each CUDA thread gets its own copy of them.
template <typename Body, typename... Args>
void launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
            Body body, Args&&... args) {
  struct Context {
    Body body;
    std::tuple<std::decay_t<Args>...> args;
  };
  Context context{body, {std::forward<Args>(args)...}};
  detail::run_launch(
      name, grid, block, shared_bytes, stream,
      [](void* p) noexcept {
        auto& c = *static_cast<Context*>(p);
        std::apply(c.body, c.args);  // by value: a fresh copy of the arguments per thread
      },
      &context);
}

// Barriers of the running block: every thread of the block must reach them.
void syncthreads();
int syncthreads_count(int predicate);  // also __syncthreads_or / __syncthreads_and

// Warp exchange: every thread of the warp deposits `bits`, waits for the warp and reads its
// source lane's deposit (its own when the source lane does not exist).
enum class Shuffle { kIdx, kUp, kDown, kXor };
uint64_t warp_shuffle(unsigned mask, uint64_t bits, Shuffle kind, int arg, int width);
void syncwarp(unsigned mask);

// ---- for tests --------------------------------------------------------------------------------
// Names of the kernels launched by this process (template arguments stripped), first launch
// first. LOCKSTEP_EMULATOR_LAUNCH_LOG=<file> also writes each name there, one a line, as it is
// first launched (the file is truncated by the process's first launch).
std::vector<std::string> launched_kernels();
// Work items the device was given so far, in this process: kernel launches and cuBLAS GEMM calls
// (what the step ledger counts as launches; ops/op_ledger.h). Copies and memsets are not counted.
int64_t device_launches();
// The emulated cuBLAS counts each GEMM call here.
void note_library_launch();
// "ns::kernel<true>" -> "kernel".
std::string kernel_name(const char* launched_as);
// Bytes cudaMalloc may hand out on `device` (default: LOCKSTEP_EMULATED_GPU_MEMORY, else 16 GiB),
// and the bytes it has handed out and not had back.
void set_memory_limit(int device, size_t bytes);
size_t memory_limit(int device);
size_t memory_in_use(int device);

}  // namespace ls::cuda_emu
