// Compiled instead of the NCCL communicator when lockstep is built without CUDA.
#include "engine/core/error.h"
#include "parallel/communicator.h"
#include "parallel/nccl/nccl_communicator.h"

namespace ls {

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions&) {
  LS_THROW("cannot make NCCL communicators for ", devices_str(devices),
           ": lockstep was built without the CUDA backend (configure with the CUDA toolkit and "
           "NCCL installed, -DLOCKSTEP_CUDA=ON)");
}

std::vector<std::unique_ptr<Communicator>> make_nccl_world_communicators(
    const World& world, const CommunicatorOptions&) {
  LS_THROW("make_world_communicators on ", world.describe(),
           ": cannot make NCCL communicators for ", devices_str(world.local_devices()),
           ": lockstep was built without the CUDA backend (configure with the CUDA toolkit and "
           "NCCL installed, -DLOCKSTEP_CUDA=ON)");
}

}  // namespace ls
