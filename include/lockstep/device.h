// Devices and device specs.
//
// A Device is a backend kind plus an index: host:0, cuda:1. A spec string names a list of them:
//   "auto"      every usable GPU, else one host device per core
//   "cuda"      every usable GPU (an error that says why when there is none)
//   "cuda:0,2"  those GPUs
//   "host:4"    four host devices (host:0 .. host:3); "host" one per core
// Bad specs (host:0, duplicates, out-of-range indices, unknown words) raise ls::Error.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ls {

enum class DeviceKind { kHost, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;

  bool is_host() const { return kind == DeviceKind::kHost; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  std::string str() const;  // "host:0", "cuda:1"
  bool operator==(const Device&) const = default;
};

std::string_view device_kind_name(DeviceKind kind);

// Number of cores this process may run on (sched affinity), at least 1.
int host_core_count();

// Whether GPUs can be used, and if not, why (no driver, driver too old, no device, or lockstep
// built without CUDA). Implemented by the CUDA backend file that is compiled in.
struct CudaAvailability {
  int device_count = 0;
  std::string reason_unavailable;  // empty when device_count > 0
};
CudaAvailability cuda_availability();

// Whether this build of lockstep contains the CUDA backend.
bool built_with_cuda();

// True when CUDA device `device` has its primary context in this process (it holds GPU memory
// there); false when it has none, when the driver cannot be asked, or without the CUDA backend.
bool cuda_primary_context_active(int device) noexcept;

// Host devices: how many cores each one uses for its kernels (oneTBB arena size and GEMM
// splits). Default 1, so N host devices use N cores and never oversubscribe the machine.
// Must be set before the first host device is used; later calls are an error.
void set_host_threads_per_device(int threads);
int host_threads_per_device();

std::vector<Device> parse_devices(std::string_view spec);
std::string devices_str(const std::vector<Device>& devices);  // "host:0,host:1"

}  // namespace ls
