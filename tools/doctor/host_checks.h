// lockstep-doctor's host checks, which run on every machine: memory available for the run, and
// the CPU cores against the devices that need them (a host device takes one core per thread; a
// GPU's replica thread and the communicator's progress want a core each).
#pragma once

#include <string>
#include <vector>

#include "engine/core/device.h"
#include "tools/doctor/finding.h"

namespace ls::doctor {

// From a /proc/meminfo file: WARN when under 10% of the memory is available.
Finding check_host_memory(const std::string& meminfo_path);

// Cores this process may use vs the devices: host devices x threads per device beyond the
// cores oversubscribe (WARN); `cores` is the affinity count (host_core_count()).
Finding check_cores(const std::vector<Device>& devices, int cores, int threads_per_host_device);

}  // namespace ls::doctor
