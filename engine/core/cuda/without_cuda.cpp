// The CUDA entry points of a build without the CUDA backend (LOCKSTEP_CUDA=OFF, or no toolkit /
// NCCL found): built_with_cuda() is false, cuda_availability() explains how to get a CUDA build,
// and asking for a CUDA runtime or the CUDA kernels raises ls::Error with that explanation.
#include <memory>

#include <lockstep/device.h>
#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include "engine/core/system_info.h"

namespace ls {
namespace {
constexpr const char* kNoCudaReason =
    "lockstep was built without the CUDA backend (configure with the CUDA toolkit and NCCL "
    "installed, -DLOCKSTEP_CUDA=ON)";
}  // namespace

bool built_with_cuda() { return false; }

bool cuda_primary_context_active(int) noexcept { return false; }

CudaAvailability cuda_availability() { return {0, kNoCudaReason}; }

std::unique_ptr<DeviceRuntime> make_cuda_runtime(Device device) {
  LS_THROW("cannot use ", device.str(), ": ", kNoCudaReason);
}

}  // namespace ls

namespace ls {
GpuReport gpu_report() {
  GpuReport report;
  report.unavailable_reason = cuda_availability().reason_unavailable;
  return report;
}
double peer_copy_gbps(int from, int to, int64_t) {
  LS_THROW("cannot copy from cuda:", from, " to cuda:", to, ": ", kNoCudaReason);
}
}  // namespace ls
