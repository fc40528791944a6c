// host_info(): cores from the affinity mask, memory and CPU model from /proc.
#include "engine/core/system_info.h"

#include <fstream>
#include <sstream>

#include "engine/core/device.h"

namespace ls {

HostInfo host_info() {
  HostInfo info;
  info.cores = host_core_count();
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream fields(line.substr(9));
      int64_t kib = 0;
      fields >> kib;
      info.memory_bytes = kib * 1024;
    }
  }
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
