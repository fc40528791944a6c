// host_info(): cores from the affinity mask, memory and CPU model from /proc; the meminfo reader
// and the GPU report's bus-id lookup that the doctor and telemetry share.
#include "engine/core/system_info.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <lockstep/device.h>

namespace ls {

int64_t meminfo_bytes(const std::string& path, const std::string& name) {
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

std::string pci_bus_id_of(const GpuReport& report, int cuda_index) {
  for (const GpuInfo& g : report.gpus) {
    if (g.index == cuda_index) return g.pci_bus_id;
  }
  return "";
}

HostInfo host_info() {
  HostInfo info;
  info.cores = host_core_count();
  info.memory_bytes = std::max<int64_t>(0, meminfo_bytes("/proc/meminfo", "MemTotal"));
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      info.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return info;
}

}  // namespace ls
