// make_world_communicators: one Communicator per local device of a World, spanning every device
// of every process. A world of one process gets make_communicators(local devices) unchanged;
// more processes get the hierarchical host communicators of parallel/mpi/ (host devices only:
// NCCL across processes is not built yet). Collective over the processes.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/world.h"

namespace ls {

std::vector<std::unique_ptr<Communicator>> make_world_communicators(
    const World& world, const CommunicatorOptions& options = {});

}  // namespace ls
