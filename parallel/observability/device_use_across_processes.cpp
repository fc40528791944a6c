#include "parallel/observability/device_use_across_processes.h"

#include <lockstep/error.h>

namespace ls {
namespace {

// One device's record in the exchanged vector: whether it is there, whose it is, which device,
// and its parts. Exactly one process writes each replica's record; the others leave zeros, so
// the sum over processes is every record.
enum Field {
  kPresent,
  kProcess,
  kKind,
  kIndex,
  kSteps,
  kWindow,
  kInput,
  kCompute,
  kCommWait,
  kIdle,
  kBubble,
  kFields
};

}  // namespace

std::vector<DeviceUse> device_use_across_processes(const std::vector<DeviceUse>& mine, int replicas,
                                                   ProcessGroup& processes) {
  if (!processes.several()) return mine;
  std::vector<double> records(static_cast<size_t>(replicas) * kFields, 0.0);
  for (const DeviceUse& u : mine) {
    LS_ASSERT(u.replica >= 0 && u.replica < replicas);
    double* r = &records[static_cast<size_t>(u.replica) * kFields];
    r[kPresent] = 1;
    r[kProcess] = processes.rank();
    r[kKind] = static_cast<double>(u.device.kind);
    r[kIndex] = u.device.index;
    r[kSteps] = static_cast<double>(u.steps);
    r[kWindow] = u.window_ms;
    r[kInput] = u.input_ms;
    r[kCompute] = u.compute_ms;
    r[kCommWait] = u.comm_wait_ms;
    r[kIdle] = u.idle_ms;
    r[kBubble] = u.bubble_ms;
  }
  const std::vector<double> all =
      processes.sum_over_processes(records, "device use: gathering every process's devices");
  std::vector<DeviceUse> out;
  for (int replica = 0; replica < replicas; ++replica) {
    const double* r = &all[static_cast<size_t>(replica) * kFields];
    if (r[kPresent] != 1) continue;  // a device no process measured
    DeviceUse u;
    u.device =
        Device{static_cast<DeviceKind>(static_cast<int>(r[kKind])), static_cast<int>(r[kIndex])};
    u.replica = replica;
    u.process = static_cast<int>(r[kProcess]);
    u.steps = static_cast<int64_t>(r[kSteps]);
    u.window_ms = r[kWindow];
    u.input_ms = r[kInput];
    u.compute_ms = r[kCompute];
    u.comm_wait_ms = r[kCommWait];
    u.idle_ms = r[kIdle];
    u.bubble_ms = r[kBubble];
    out.push_back(u);
  }
  return out;
}

}  // namespace ls
