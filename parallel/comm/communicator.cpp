// make_communicators (picks the backend for a device list), the device-list rules every backend
// checks, and issue_collective (see parallel/comm/communicator.h).
#include "parallel/comm/communicator.h"

#include <lockstep/error.h>

namespace ls {

void check_clique_devices(const std::vector<Device>& devices, const CommunicatorOptions& options,
                          std::string_view who, std::optional<DeviceKind> kind) {
  LS_CHECK(!devices.empty(), who, ": no devices given; pass at least one device");
  const DeviceKind want = kind.value_or(devices[0].kind);
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& device = devices[i];
    LS_CHECK(device.index >= 0, who, ": ", device.str(), " is not a valid device index");
    if (!kind) {
      LS_CHECK(device.kind == want, who, ": cannot mix ", devices[0].str(), " and ", device.str(),
               " in one data-parallel group; use all host or all cuda devices");
    }
    LS_CHECK(device.kind == want, who, ": ", device.str(), " is not a ",
             want == DeviceKind::kCuda ? "CUDA" : "host", " device (", devices_str(devices),
             "); the host communicator connects host devices, NCCL connects CUDA devices");
    for (size_t j = 0; j < i; ++j) {
      LS_CHECK(devices[j] != device, who, ": ", device.str(), " appears twice in ",
               devices_str(devices), "; give each rank its own device (a device listed twice "
               "would hold two ranks, and two NCCL ranks on one GPU may hang)");
    }
  }
  LS_CHECK(options.timeout.count() > 0, who, ": collective timeout must be positive, got ",
           options.timeout.count(), " ms");
}

std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const CommunicatorOptions& options) {
  check_clique_devices(devices, options, "make_communicators");
  if (devices[0].is_host()) return make_host_communicators(devices, options);
  return make_nccl_communicators(devices, options);
}

void issue_collective(Communicator& comm, const CollectiveDesc& d, Stream& stream) {
  switch (d.kind) {
    case CollectiveKind::kAllReduce:
      return comm.all_reduce(d.send, d.recv, d.count, d.dtype, d.op, stream);
    case CollectiveKind::kReduceScatter:
      return comm.reduce_scatter(d.send, d.recv, d.count, d.dtype, d.op, stream);
    case CollectiveKind::kAllGather:
      return comm.all_gather(d.send, d.recv, d.count, d.dtype, stream);
    case CollectiveKind::kBroadcast:
      return comm.broadcast(d.send, d.recv, d.count, d.dtype, d.root, stream);
    case CollectiveKind::kReduce:
      return comm.reduce(d.send, d.recv, d.count, d.dtype, d.op, d.root, stream);
  }
  LS_ASSERT(false, "unknown CollectiveKind ", static_cast<int>(d.kind));
}

}  // namespace ls
