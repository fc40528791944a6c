// Host checks (see host_checks.h).
#include "tools/doctor/host_checks.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "engine/core/system_info.h"

namespace ls::doctor {

Finding check_host_memory(const std::string& meminfo_path) {
  Finding f{"host-memory", "host", Verdict::kOk, "", ""};
  const int64_t total = meminfo_bytes(meminfo_path, "MemTotal");
  const int64_t available = meminfo_bytes(meminfo_path, "MemAvailable");
  if (total <= 0 || available < 0) {
    f.verdict = Verdict::kNotApplicable;
    f.detail = "cannot read MemTotal/MemAvailable from " + meminfo_path;
    return f;
  }
  f.detail = gib_text(available) + " of " + gib_text(total) + " available";
  if (available * 10 < total) {
    f.verdict = Verdict::kWarn;
    f.fix =
        "other processes hold most of the memory: data loading and pinned buffers may fail "
        "or swap; stop them or train with a smaller batch";
  }
  return f;
}

int numa_node_count(const std::string& sys_root) {
  std::ifstream in(sys_root + "/devices/system/node/online");
  std::string list;
  if (!std::getline(in, list) || list.empty()) return 0;
  int count = 0;
  std::istringstream ranges(list);
  for (std::string range; std::getline(ranges, range, ',');) {
    int first = 0, last = 0;
    char dash = 0;
    std::istringstream r(range);
    if (!(r >> first)) return 0;
    last = first;
    if (r >> dash && !(dash == '-' && r >> last)) return 0;
    if (last < first) return 0;
    count += last - first + 1;
  }
  return count;
}

Finding check_cores(const std::vector<Device>& devices, int cores, int threads_per_host_device,
                    int numa_nodes) {
  Finding f{"cores", "host", Verdict::kOk, "", ""};
  int host_devices = 0, gpus = 0;
  for (const Device& d : devices) (d.is_cuda() ? gpus : host_devices)++;
  const int wanted = host_devices * threads_per_host_device + gpus;
  f.detail = std::to_string(cores) + " core(s) for " + std::to_string(host_devices) +
             " host device(s) x " + std::to_string(threads_per_host_device) + " thread(s) and " +
             std::to_string(gpus) + " GPU replica thread(s)";
  if (numa_nodes > 0) f.detail += ", " + std::to_string(numa_nodes) + " NUMA node(s)";
  if (wanted > cores) {
    f.verdict = Verdict::kWarn;
    f.fix =
        "more device threads than cores: replicas wait for a core, steps stretch and slow "
        "collectives look like hangs; use fewer host devices (--devices host:" +
        std::to_string(std::max(1, cores / std::max(1, threads_per_host_device))) +
        ") or give the process more cores (taskset, the container's CPU limit)";
  }
  return f;
}

}  // namespace ls::doctor
