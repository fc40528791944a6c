// The op-table registry (see ops/op_table.h). Backend files register while lockstep_ops loads;
// a mutex guards the map, so registration order between files does not matter.
#include "ops/op_table.h"

#include <mutex>
#include <unordered_map>

#include <lockstep/error.h>

namespace ls::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::type_index, std::array<const void*, kDeviceKindCount>> tables;
};

// Constructed on first use: registrations run during static initialisation, in any order.
Registry& registry() {
  static Registry instance;
  return instance;
}

size_t slot_of(DeviceKind kind) {
  const auto index = static_cast<size_t>(kind);
  LS_ASSERT(index < kDeviceKindCount, "device kind ", index, " has no op-table slot");
  return index;
}

}  // namespace

bool register_op_table(std::type_index table, DeviceKind kind, const void* entries) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto& slots = r.tables[table];
  LS_ASSERT(slots[slot_of(kind)] == nullptr, "two ", table.name(), " tables for one backend");
  slots[slot_of(kind)] = entries;
  return true;
}

const void* find_op_table(std::type_index table, DeviceKind kind) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.tables.find(table);
  return it == r.tables.end() ? nullptr : it->second[slot_of(kind)];
}

void throw_unsupported_op(const char* op, Device device) {
  if (device.is_cuda() && !built_with_cuda()) {
    LS_THROW(op, " is not supported on ", device.str(),
             ": lockstep was built without the CUDA backend (configure with the CUDA toolkit "
             "and NCCL installed, -DLOCKSTEP_CUDA=ON)");
  }
  LS_THROW(op, " is not supported on this backend (", device.str(),
           "): it has no kernel for it; run it on a host device, or add the kernel to the "
           "backend's table (ops/op_table.h)");
}

}  // namespace ls::detail
