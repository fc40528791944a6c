// make_communicators: picks the backend for a device list (see parallel/communicator.h).
#include "parallel/communicator.h"

#include <algorithm>

#include "engine/core/error.h"

namespace ls {

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const CommunicatorOptions& options) {
  LS_CHECK(!devices.empty(), "make_communicators: no devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    LS_CHECK(devices[i].kind == devices[0].kind, "cannot mix ", devices[0].str(), " and ",
             devices[i].str(), " in one data-parallel group; use all host or all cuda devices");
    for (size_t j = 0; j < i; ++j) {
      LS_CHECK(devices[i] != devices[j], devices[i].str(),
               " appears twice; each device can hold one replica");
    }
  }
  LS_CHECK(options.timeout.count() > 0, "collective timeout must be positive, got ",
           options.timeout.count(), " ms");
  if (devices[0].is_host()) return make_host_communicators(devices, options);
  return make_nccl_communicators(devices, options);
}

}  // namespace ls
