// The verdict over every process's devices (issue 25): under mpirun each process measures only
// its own devices (DeviceUseMeter); this sums every device's parts across the processes, so each
// process can judge all devices at once and name remote ones ("host:1 (process 1)").
// A collective: every process calls it at the same point of its run.
// Thread-safety: the trainer's thread.
#pragma once

#include <vector>

#include <lockstep/device_use.h>
#include "parallel/runtime/process_group.h"

namespace ls {

// Every device of every process, by global replica number, each with its process set. `mine`
// are this process's (their replica numbers global), `replicas` the total over all processes.
// One process: `mine` unchanged.
std::vector<DeviceUse> device_use_across_processes(const std::vector<DeviceUse>& mine, int replicas,
                                                   ProcessGroup& processes);

}  // namespace ls
