// A GpuMonitor that answers with canned readings, by normalized bus id, as NVML would: the
// fixture GPUs of the doctor's checks (tests/doctor/) and of training telemetry
// (tests/parallel/telemetry_test.cpp). A bus id it was not given is a GPU NVML does not know.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/gpu_monitor.h"

namespace ls::testing {

class FixtureMonitor : public GpuMonitor {
 public:
  struct Gpu {
    GpuSample sample;
    std::optional<std::vector<GpuProcess>> processes = std::vector<GpuProcess>{};
    std::optional<ComputeMode> mode = ComputeMode::kDefault;
  };

  std::string unavailable;
  std::map<std::string, Gpu> gpus;

  Gpu& add(const std::string& bus_id) { return gpus[normalize_pci_bus_id(bus_id)]; }

  std::string unavailable_reason() const override { return unavailable; }
  std::string device_error(const std::string& bus_id) override {
    if (!unavailable.empty()) return unavailable;
    return find(bus_id) != nullptr ? "" : "NVML has no GPU at " + bus_id + " (Not Found)";
  }
  std::optional<GpuSample> sample(const std::string& bus_id) override {
    const Gpu* gpu = find(bus_id);
    return gpu != nullptr ? std::optional<GpuSample>(gpu->sample) : std::nullopt;
  }
  std::optional<std::vector<GpuProcess>> processes(const std::string& bus_id) override {
    const Gpu* gpu = find(bus_id);
    return gpu != nullptr ? gpu->processes : std::nullopt;
  }
  std::optional<ComputeMode> compute_mode(const std::string& bus_id) override {
    const Gpu* gpu = find(bus_id);
    return gpu != nullptr ? gpu->mode : std::nullopt;
  }

 private:
  const Gpu* find(const std::string& bus_id) const {
    auto it = gpus.find(normalize_pci_bus_id(bus_id));
    return it != gpus.end() ? &it->second : nullptr;
  }
};

}  // namespace ls::testing
