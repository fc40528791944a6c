// gpu_report() for builds with CUDA: device names, memory, PCI ids, the peer-access matrix
// (cudaDeviceCanAccessPeer) and the driver, runtime and NCCL versions.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include <lockstep/device.h>
#include "engine/core/system_info.h"

namespace ls {
namespace {
// CUDA encodes versions as 1000 * major + 10 * minor.
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}
}  // namespace

GpuReport gpu_report() {
  GpuReport report;
  int version = 0;
  if (cudaDriverGetVersion(&version) == cudaSuccess && version > 0) {
    report.driver_version = cuda_version_string(version);
  }
  if (cudaRuntimeGetVersion(&version) == cudaSuccess)
    report.runtime_version = cuda_version_string(version);
  if (ncclGetVersion(&version) == ncclSuccess) {
    // NCCL >= 2.9: 10000 * major + 100 * minor + patch.
    report.nccl_version = std::to_string(version / 10000) + "." +
                          std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  }
  const CudaAvailability available = cuda_availability();
  report.unavailable_reason = available.reason_unavailable;
  for (int i = 0; i < available.device_count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, i);
    report.gpus.push_back({i, prop.name, static_cast<int64_t>(prop.totalGlobalMem), bus});
  }
  const size_t n = report.gpus.size();
  report.peer_access.assign(n, std::vector<bool>(n, false));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      int can = i == j;
      if (i != j) cudaDeviceCanAccessPeer(&can, static_cast<int>(i), static_cast<int>(j));
      report.peer_access[i][j] = can != 0;
    }
  }
  (void)cudaGetLastError();  // the queries above must not leave a sticky "last error"
  return report;
}

}  // namespace ls
