// DeviceGuard: makes a CUDA device current for a scope and restores, on exit, the device the
// thread really had current before (CUDA's current device is per thread). Every CUDA backend
// entry point that touches a device (streams, events, allocations, kernel launches) takes one
// first, so callers never depend on which device happens to be current. Setting the
// already-current device costs no driver call. DeviceGuard(device, std::nothrow) ignores errors,
// for destructors. See Note [Bind before any device state].
// Thread-safety: acts on the calling thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <new>

#include "engine/core/cuda/cuda_check.h"
#include <lockstep/device.h>

namespace ls {

// Note [Bind before any device state]
// cudaGetDevice answers 0 on a thread that never chose a device, and since CUDA 12 cudaSetDevice
// creates the device's primary context at once (pytorch#94864, #91219). A guard that "restored"
// device 0 on such a thread would put a context of ~0.5 GB on GPU 0 for a process that drives
// only cuda:1, and fail in exclusive-process mode. So a guard restores only a device the thread
// really had current: one lockstep bound on this thread, one other than 0 (someone chose it), or
// 0 when its primary context is already active (no new context). A thread with none keeps the
// guard's device. And every replica thread binds its device before it makes any device state
// (parallel/data_parallel/replica.cpp), so nothing of it lands on another GPU.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  DeviceGuard(int device, std::nothrow_t) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = -1;  // the device to restore; -1: the thread had none
};

// Makes `device` the calling thread's current device for good (what DeviceGuard remembers as a
// device the thread chose). DeviceRuntime::bind_current_thread calls it.
void bind_cuda_device(int device);
// cuda_primary_context_active (lockstep/device.h) asks cuDevicePrimaryCtxGetState through the
// runtime's driver entry points.

}  // namespace ls
