// Host checks (see host_checks.h).
#include "tools/doctor/host_checks.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace ls::doctor {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (int64_t{1} << 30));
  return buf;
}

// "MemAvailable:   123456 kB" -> bytes; -1 when the field is absent or malformed.
int64_t meminfo_field(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + ":", 0) != 0) continue;
    std::istringstream fields(line.substr(name.size() + 1));
    int64_t kib = -1;
    std::string unit;
    if (fields >> kib >> unit && unit == "kB" && kib >= 0) return kib * 1024;
    return -1;
  }
  return -1;
}

}  // namespace

Finding check_host_memory(const std::string& meminfo_path) {
  Finding f{"host-memory", "host", Verdict::kOk, "", ""};
  const int64_t total = meminfo_field(meminfo_path, "MemTotal");
  const int64_t available = meminfo_field(meminfo_path, "MemAvailable");
  if (total <= 0 || available < 0) {
    f.verdict = Verdict::kNotApplicable;
    f.detail = "cannot read MemTotal/MemAvailable from " + meminfo_path;
    return f;
  }
  f.detail = gib(available) + " of " + gib(total) + " available";
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
