// DeviceGuard: makes a CUDA device current for a scope and restores the previous one on exit
// (CUDA's current device is per thread). Every CUDA backend entry point that touches a device
// (streams, events, allocations, kernel launches) takes one first, so callers never depend on
// which device happens to be current. Setting the already-current device costs no driver call.
// DeviceGuard(device, std::nothrow) ignores errors, for destructors.
// Thread-safety: acts on the calling thread only.
#pragma once

#include <cuda_runtime_api.h>

#include <new>

#include "engine/core/cuda/cuda_check.h"

namespace ls {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    LS_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) LS_CUDA_CHECK(cudaSetDevice(device_));
  }
  DeviceGuard(int device, std::nothrow_t) noexcept : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device_;  // nothing to restore
    if (previous_ != device_ && cudaSetDevice(device_) != cudaSuccess) previous_ = device_;
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);  // best effort: destructors must not throw
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace ls
