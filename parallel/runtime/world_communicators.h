// make_world_communicators: one Communicator per local device of a World, spanning every device
// of every process (rank = global replica, size = every replica). A world of one process gets
// make_communicators(local devices) unchanged; more processes get, for host devices, the
// hierarchical host communicators of parallel/mpi/, for CUDA devices one NCCL communicator over
// every GPU of every process (parallel/nccl/nccl_factories.cpp; compiled, not yet run on a GPU).
// Every process must drive devices of one kind, the same kind everywhere (lockstep-doctor under
// the same mpirun checks that). Collective over the processes: every process calls it.
#pragma once

#include <memory>
#include <vector>

#include "parallel/comm/communicator.h"
#include <lockstep/world.h>

namespace ls {

std::vector<std::unique_ptr<Communicator>> make_world_communicators(
    const World& world, const CommunicatorOptions& options = {});

}  // namespace ls
