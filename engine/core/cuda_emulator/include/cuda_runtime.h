// The device side of the CPU emulator (LOCKSTEP_CUDA=EMULATED), for CUDA sources compiled as C++:
// the execution-space keywords defined away, threadIdx/blockIdx/blockDim/gridDim of the running
// fiber, __shared__ as per-OS-thread statics (blocks run one after another on the launching
// thread, so a static is the block's own for as long as the block runs), barriers and warp
// shuffles through the fiber scheduler (engine/core/cuda_emulator/emulator.h), atomics, bit casts
// and the math intrinsics the kernels use (IEEE f32 on the host; GPU results may differ in the
// last ulps of expf, tanhf, erff, ...).
#pragma once

#include <cuda_runtime_api.h>
#include <math.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include <lockstep/clock.h>
#include "engine/core/cuda_emulator/emulator.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static thread_local

#define threadIdx (::ls::cuda_emu::detail::t_coords.thread_idx)
#define blockIdx (::ls::cuda_emu::detail::t_coords.block_idx)
#define blockDim (::ls::cuda_emu::detail::t_coords.block_dim)
#define gridDim (::ls::cuda_emu::detail::t_coords.grid_dim)

inline constexpr int warpSize = 32;

// The GPU's %globaltimer (nanoseconds), which CUDA sources read with inline PTX: the host's
// steady clock here, as on host devices.
namespace ls::cuda_emu {
inline int64_t global_timer_ns() { return ::ls::steady_now_ns(); }
}  // namespace ls::cuda_emu

// ---- barriers and warp shuffles ---------------------------------------------------------------
inline void __syncthreads() { ::ls::cuda_emu::syncthreads(); }
inline int __syncthreads_count(int predicate) {
  return ::ls::cuda_emu::syncthreads_count(predicate != 0);
}
inline int __syncthreads_or(int predicate) { return __syncthreads_count(predicate) != 0; }
inline int __syncthreads_and(int predicate) {
  return __syncthreads_count(predicate) ==
         static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::ls::cuda_emu::syncwarp(mask); }

namespace ls::cuda_emu::detail {
template <typename T>
T shuffle(unsigned mask, T value, Shuffle kind, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t));
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_shuffle(mask, bits, kind, arg, width);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}
}  // namespace ls::cuda_emu::detail

template <typename T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = warpSize) {
  return ::ls::cuda_emu::detail::shuffle(mask, value, ::ls::cuda_emu::Shuffle::kIdx, src_lane,
                                         width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  return ::ls::cuda_emu::detail::shuffle(mask, value, ::ls::cuda_emu::Shuffle::kUp,
                                         static_cast<int>(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = warpSize) {
  return ::ls::cuda_emu::detail::shuffle(mask, value, ::ls::cuda_emu::Shuffle::kDown,
                                         static_cast<int>(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = warpSize) {
  return ::ls::cuda_emu::detail::shuffle(mask, value, ::ls::cuda_emu::Shuffle::kXor, lane_mask,
                                         width);
}

// ---- memory fences and atomics (std::atomic_ref: launches on other OS threads may race) -------
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <typename T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <typename T>
T atomicSub(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_sub(value);
}
template <typename T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value, whether or not it was swapped
}
template <typename T>
T atomicMax(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (old < value && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <typename T>
T atomicMin(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (value < old && !ref.compare_exchange_weak(old, value)) {
  }
  return old;
}

// ---- bit casts and f32 intrinsics ---------------------------------------------------------------
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }

// Round-to-nearest arithmetic, never contracted (the CUDA sources build with -ffp-contract=off).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
