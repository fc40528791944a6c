// Compiled instead of the NCCL communicator when lockstep is built without NCCL: without the CUDA
// backend, or with the CUDA emulator (LOCKSTEP_CUDA=EMULATED runs kernels on the CPU; there is no
// NCCL to emulate, so several emulated GPUs cannot be one data-parallel group).
#include <lockstep/error.h>
#include "parallel/comm/communicator.h"
#include "parallel/nccl/nccl_communicator.h"

namespace ls {
namespace {

#if defined(LOCKSTEP_CUDA_EMULATED)
constexpr const char* kWhyNoNccl =
    ": this is an emulated CUDA build (LOCKSTEP_CUDA=EMULATED), which has no NCCL; use host "
    "devices for collectives here, or build with the CUDA toolkit and NCCL (-DLOCKSTEP_CUDA=ON)";
#else
constexpr const char* kWhyNoNccl =
    ": lockstep was built without the CUDA backend (configure with the CUDA toolkit and NCCL "
    "installed, -DLOCKSTEP_CUDA=ON)";
#endif

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions&) {
  LS_THROW("cannot make NCCL communicators for ", devices_str(devices), kWhyNoNccl);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_world_communicators(
    const World& world, const CommunicatorOptions&) {
  LS_THROW("make_world_communicators on ", world.describe(),
           ": cannot make NCCL communicators for ", devices_str(world.local_devices()), kWhyNoNccl);
}

}  // namespace ls
