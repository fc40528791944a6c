// The GPUs lockstep-doctor's checks look at, named as the rest of lockstep names them.
#pragma once

#include <string>

namespace ls::doctor {

struct GpuId {
  int index = 0;           // CUDA ordinal: the device is "cuda:<index>"
  std::string pci_bus_id;  // as CUDA reports it, e.g. "0000:3B:00.0" (sysfs spells it lowercase)
  std::string name() const { return "cuda:" + std::to_string(index); }
};

}  // namespace ls::doctor
