// lockstep-doctor's host checks, which run on every machine: memory available for the run, and
// the CPU cores against the devices that need them (a host device takes one core per thread; a
// GPU's replica thread and the communicator's progress want a core each).
#pragma once

#include <string>
#include <vector>

#include <lockstep/device.h>
#include "tools/doctor/finding.h"

namespace ls::doctor {

// From a /proc/meminfo file: WARN when under 10% of the memory is available.
Finding check_host_memory(const std::string& meminfo_path);

// Cores this process may use vs the devices: host devices x threads per device beyond the
// cores oversubscribe (WARN); `cores` is the affinity count (host_core_count()), `numa_nodes`
// how many memory nodes the machine has (0: unknown).
Finding check_cores(const std::vector<Device>& devices, int cores, int threads_per_host_device,
                    int numa_nodes = 0);

// NUMA nodes online, from <sys_root>/devices/system/node/online ("0-1,3" -> 3); 0 when unknown.
int numa_node_count(const std::string& sys_root);

}  // namespace ls::doctor
