// The one message of an out-of-range value, whichever backend found it, and the registry of the
// places kernels report from (engine/core/device_fault.h).
#include "engine/core/device_fault.h"

#include <mutex>
#include <vector>

#include <lockstep/error.h>

namespace ls {
namespace {

struct FaultSite {
  const char* op;
  const char* what;
  const char* hint;
};

struct FaultSites {
  std::mutex mutex;
  std::vector<FaultSite> sites;
};

FaultSites& fault_sites() {
  static auto* registry = new FaultSites();  // never destroyed: streams may outlive statics
  return *registry;
}

}  // namespace

int32_t register_fault_site(const char* op, const char* what, const char* hint) {
  FaultSites& registry = fault_sites();
  std::lock_guard lock(registry.mutex);
  registry.sites.push_back({op, what, hint});
  return static_cast<int32_t>(registry.sites.size() - 1);
}

std::string describe_out_of_range(const char* op, const char* what, int64_t index, int64_t value,
                                  int64_t limit, const char* hint) {
  return detail::concat(op, ": ", what, " ", value, " in row ", index, " is outside [0, ", limit,
                        "); ", hint);
}

std::string describe_fault(const DeviceFault& fault) {
  FaultSite site{"a kernel", "a value", "(the kernel reported an unregistered fault site)"};
  {
    FaultSites& registry = fault_sites();
    std::lock_guard lock(registry.mutex);
    if (fault.site >= 0 && static_cast<size_t>(fault.site) < registry.sites.size()) {
      site = registry.sites[static_cast<size_t>(fault.site)];
    }
  }
  return describe_out_of_range(site.op, site.what, fault.index, fault.value, fault.limit,
                               site.hint);
}

}  // namespace ls
