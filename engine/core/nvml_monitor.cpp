// make_nvml_monitor(): the GpuMonitor backed by NVML, the NVIDIA Management Library that ships
// with the driver (libnvidia-ml.so.1). Loaded with dlopen at run time, so lockstep builds and
// runs without it; the few NVML entry points and structs used are declared below with NVML's
// documented C ABI (NVML API reference, https://docs.nvidia.com/deploy/nvml-api/).
// Thread-safety: NVML itself is thread-safe ("NVML is thread-safe so it is safe to make
// simultaneous NVML calls from multiple threads", nvml.h); the only state of ours, the cache of
// device handles, is behind a mutex.
#include <dlfcn.h>

#include <map>
#include <mutex>

#include "engine/core/gpu_monitor.h"

namespace ls {
namespace {

// ---- NVML's ABI: the declarations used -----------------------------------------------------
// Each was confirmed against nvml.h as NVIDIA publishes it (the copy in NVIDIA/go-nvml,
// gen/nvml/nvml.h: NVML_API_VERSION 13, 2026, and its 2021 version, API 11). C enums are
// int-sized, so enum parameters are passed as int.
namespace nvml {

using Return = int;                      // nvmlReturn_t
using Device = struct nvmlDevice_st*;    // nvmlDevice_t: an opaque handle
constexpr Return kSuccess = 0;           // NVML_SUCCESS
constexpr Return kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE: call again, bigger
constexpr int kTemperatureGpu = 0;       // NVML_TEMPERATURE_GPU (nvmlTemperatureSensors_t)
constexpr int kClockSm = 1;              // NVML_CLOCK_SM (nvmlClockType_t)
// NVML_VALUE_NOT_AVAILABLE (-1) as an unsigned long long: usedGpuMemory is not reported.
constexpr unsigned long long kValueNotAvailable = ~0ULL;

struct Memory {  // nvmlMemory_t (v1): bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct ProcessInfo {  // nvmlProcessInfo_t = nvmlProcessInfo_v2_t, taken by ..._v3 and ..._v2
  unsigned int pid;
  unsigned long long usedGpuMemory;  // bytes
  unsigned int gpuInstanceId;        // MIG only; 0xFFFFFFFF otherwise
  unsigned int computeInstanceId;
};

struct Temperature {  // nvmlTemperature_v1_t, for nvmlDeviceGetTemperatureV (NVML 13+)
  unsigned int version;
  int sensorType;
  int temperature;  // degrees C
};
// nvmlTemperature_v1 = NVML_STRUCT_VERSION(Temperature, 1): the struct's size | (version << 24).
constexpr unsigned int kTemperatureV1 = sizeof(Temperature) | (1U << 24);

}  // namespace nvml

// The entry points, looked up by name. The first three are required; without any other the
// values it gives are reported unknown. Units and meanings from the NVML API reference.
struct NvmlApi {
  nvml::Return (*init_v2)() = nullptr;   // nvmlInit_v2: reference-counted
  nvml::Return (*shutdown)() = nullptr;  // nvmlShutdown: once per successful nvmlInit_v2
  // nvmlDeviceGetHandleByPciBusId_v2: accepts "%x:%x:%x.%x" (domain:bus:device.function).
  nvml::Return (*handle_by_pci_bus_id)(const char*, nvml::Device*) = nullptr;
  const char* (*error_string)(nvml::Return) = nullptr;             // nvmlErrorString
  nvml::Return (*power_usage)(nvml::Device, unsigned*) = nullptr;  // ..GetPowerUsage: mW
  nvml::Return (*power_limit)(nvml::Device, unsigned*) = nullptr;  // ..GetEnforcedPowerLimit: mW
  nvml::Return (*temperature_v)(nvml::Device, nvml::Temperature*) = nullptr;  // ..TemperatureV
  nvml::Return (*temperature)(nvml::Device, int, unsigned*) = nullptr;        // deprecated in 13.0
  nvml::Return (*clock)(nvml::Device, int, unsigned*) = nullptr;              // ..GetClockInfo: MHz
  nvml::Return (*max_clock)(nvml::Device, int, unsigned*) = nullptr;  // ..GetMaxClockInfo: MHz
  // nvmlDeviceGetCurrentClocksEventReasons (NVML 12.2+), else the older name of the same call,
  // nvmlDeviceGetCurrentClocksThrottleReasons (deprecated in 13.0): the same bitmask.
  nvml::Return (*clock_reasons)(nvml::Device, unsigned long long*) = nullptr;
  nvml::Return (*memory_info)(nvml::Device, nvml::Memory*) = nullptr;  // ..GetMemoryInfo
  // nvmlDeviceGetComputeRunningProcesses_v3, else _v2 (API 11): both fill nvmlProcessInfo_t.
  nvml::Return (*compute_processes)(nvml::Device, unsigned*, nvml::ProcessInfo*) = nullptr;
  nvml::Return (*compute_mode)(nvml::Device, int*) = nullptr;         // ..GetComputeMode
  nvml::Return (*process_name)(unsigned, char*, unsigned) = nullptr;  // nvmlSystemGetProcessName
};

// NVML loaded and initialised, or the reason it is not.
class NvmlLibrary {
 public:
  explicit NvmlLibrary(const std::string& path) { load(path); }
  ~NvmlLibrary() {
    // The library stays mapped: NVML may leave threads or handlers behind, and unmapping code
    // that is still referenced crashes. nvmlShutdown releases what nvmlInit_v2 took.
    if (initialised_) api_.shutdown();
  }
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const std::string& unavailable_reason() const { return unavailable_reason_; }
  const NvmlApi& api() const { return api_; }

  std::string error_name(nvml::Return code) const {
    const char* text = api_.error_string != nullptr ? api_.error_string(code) : nullptr;
    return text != nullptr ? std::string(text) : "NVML error " + std::to_string(code);
  }

  // The handle of the GPU at bus_id; "" on success, else why not.
  std::string handle(const std::string& bus_id, nvml::Device* device) {
    if (!initialised_) return unavailable_reason_;
    const std::string key = normalize_pci_bus_id(bus_id);
    if (key.empty()) return "'" + bus_id + "' is not a PCI bus id";
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = handles_.find(key); it != handles_.end()) {
      *device = it->second;
      return "";
    }
    const nvml::Return rc = api_.handle_by_pci_bus_id(key.c_str(), device);
    if (rc != nvml::kSuccess) return "NVML has no GPU at " + key + " (" + error_name(rc) + ")";
    handles_[key] = *device;  // valid until nvmlShutdown, which only our destructor calls
    return "";
  }

 private:
  template <typename F>
  void find(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(library_, name));
  }

  void load(const std::string& path) {
    library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) {
      const char* why = dlerror();
      unavailable_reason_ = "NVML not loaded (" + std::string(why != nullptr ? why : path) +
                            "); it comes with the NVIDIA driver";
      return;
    }
    find(api_.init_v2, "nvmlInit_v2");
    find(api_.shutdown, "nvmlShutdown");
    find(api_.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    if (api_.init_v2 == nullptr || api_.shutdown == nullptr ||
        api_.handle_by_pci_bus_id == nullptr) {
      unavailable_reason_ = path +
                            " is not NVML (it has no nvmlInit_v2, nvmlShutdown or "
                            "nvmlDeviceGetHandleByPciBusId_v2)";
      return;
    }
    find(api_.error_string, "nvmlErrorString");
    find(api_.power_usage, "nvmlDeviceGetPowerUsage");
    find(api_.power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    find(api_.temperature_v, "nvmlDeviceGetTemperatureV");
    find(api_.temperature, "nvmlDeviceGetTemperature");
    find(api_.clock, "nvmlDeviceGetClockInfo");
    find(api_.max_clock, "nvmlDeviceGetMaxClockInfo");
    find(api_.clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (api_.clock_reasons == nullptr)
      find(api_.clock_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    find(api_.memory_info, "nvmlDeviceGetMemoryInfo");
    find(api_.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (api_.compute_processes == nullptr)
      find(api_.compute_processes, "nvmlDeviceGetComputeRunningProcesses_v2");
    find(api_.compute_mode, "nvmlDeviceGetComputeMode");
    find(api_.process_name, "nvmlSystemGetProcessName");
    const nvml::Return rc = api_.init_v2();
    if (rc != nvml::kSuccess) {
      unavailable_reason_ = "NVML did not start: nvmlInit_v2 says " + error_name(rc);
      return;
    }
    initialised_ = true;
  }

  void* library_ = nullptr;
  NvmlApi api_;
  bool initialised_ = false;
  std::string unavailable_reason_;
  std::mutex mutex_;  // guards handles_
  std::map<std::string, nvml::Device> handles_;
};

class NvmlMonitor : public GpuMonitor {
 public:
  explicit NvmlMonitor(std::shared_ptr<NvmlLibrary> library) : library_(std::move(library)) {}

  std::string unavailable_reason() const override { return library_->unavailable_reason(); }

  std::string device_error(const std::string& pci_bus_id) override {
    nvml::Device device = nullptr;
    return library_->handle(pci_bus_id, &device);
  }

  std::optional<GpuSample> sample(const std::string& pci_bus_id) override {
    nvml::Device device = nullptr;
    if (!library_->handle(pci_bus_id, &device).empty()) return std::nullopt;
    const NvmlApi& api = library_->api();
    GpuSample s;
    unsigned value = 0;
    if (api.power_usage != nullptr && api.power_usage(device, &value) == nvml::kSuccess)
      s.power_w = value / 1000.0;
    if (api.power_limit != nullptr && api.power_limit(device, &value) == nvml::kSuccess)
      s.power_limit_w = value / 1000.0;
    s.temperature_c = temperature(api, device);
    if (api.clock != nullptr && api.clock(device, nvml::kClockSm, &value) == nvml::kSuccess)
      s.sm_clock_mhz = static_cast<int>(value);
    if (api.max_clock != nullptr && api.max_clock(device, nvml::kClockSm, &value) == nvml::kSuccess)
      s.max_sm_clock_mhz = static_cast<int>(value);
    unsigned long long reasons = 0;
    if (api.clock_reasons != nullptr && api.clock_reasons(device, &reasons) == nvml::kSuccess) {
      s.throttle_reasons_known = true;
      s.throttle_reasons = reasons;
    }
    nvml::Memory memory{};
    if (api.memory_info != nullptr && api.memory_info(device, &memory) == nvml::kSuccess) {
      s.memory_total_bytes = static_cast<int64_t>(memory.total);
      s.memory_free_bytes = static_cast<int64_t>(memory.free);
      s.memory_used_bytes = static_cast<int64_t>(memory.used);
    }
    return s;
  }

  std::optional<std::vector<GpuProcess>> processes(const std::string& pci_bus_id) override {
    nvml::Device device = nullptr;
    const NvmlApi& api = library_->api();
    if (!library_->handle(pci_bus_id, &device).empty() || api.compute_processes == nullptr)
      return std::nullopt;
    // The list can grow between the call that sizes it and the one that fills it: retry.
    std::vector<nvml::ProcessInfo> infos(16);
    for (int attempt = 0; attempt < 4; ++attempt) {
      unsigned count = static_cast<unsigned>(infos.size());
      const nvml::Return rc = api.compute_processes(device, &count, infos.data());
      if (rc == nvml::kInsufficientSize) {
        infos.resize(static_cast<size_t>(count) + 8);
        continue;
      }
      if (rc != nvml::kSuccess) return std::nullopt;
      std::vector<GpuProcess> out;
      for (unsigned i = 0; i < count && i < infos.size(); ++i) {
        GpuProcess p;
        p.pid = static_cast<pid_t>(infos[i].pid);
        if (infos[i].usedGpuMemory != nvml::kValueNotAvailable)
          p.used_memory_bytes = static_cast<int64_t>(infos[i].usedGpuMemory);
        p.name = process_name(api, infos[i].pid);
        out.push_back(std::move(p));
      }
      return out;
    }
    return std::nullopt;
  }

  std::optional<ComputeMode> compute_mode(const std::string& pci_bus_id) override {
    nvml::Device device = nullptr;
    const NvmlApi& api = library_->api();
    if (!library_->handle(pci_bus_id, &device).empty() || api.compute_mode == nullptr)
      return std::nullopt;
    int mode = 0;
    if (api.compute_mode(device, &mode) != nvml::kSuccess || mode < 0 || mode > 3)
      return std::nullopt;
    return static_cast<ComputeMode>(mode);  // NVML_COMPUTEMODE_*: 0..3 as ComputeMode
  }

 private:
  static int temperature(const NvmlApi& api, nvml::Device device) {
    // nvmlDeviceGetTemperatureV where the driver has it (NVML 13 deprecates the other).
    if (api.temperature_v != nullptr) {
      nvml::Temperature t{nvml::kTemperatureV1, nvml::kTemperatureGpu, 0};
      if (api.temperature_v(device, &t) == nvml::kSuccess) return t.temperature;
    }
    unsigned value = 0;
    if (api.temperature != nullptr &&
        api.temperature(device, nvml::kTemperatureGpu, &value) == nvml::kSuccess)
      return static_cast<int>(value);
    return GpuSample::kUnknown;
  }

  static std::string process_name(const NvmlApi& api, unsigned pid) {
    char name[256] = {};
    if (api.process_name == nullptr || api.process_name(pid, name, sizeof name) != nvml::kSuccess)
      return "";
    name[sizeof name - 1] = '\0';
    return name;
  }

  std::shared_ptr<NvmlLibrary> library_;
};

constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";  // the driver's soname, no dev package

}  // namespace

std::unique_ptr<GpuMonitor> make_nvml_monitor() {
  // Loaded and initialised on first use (thread-safe static) and never destroyed: a telemetry
  // thread may still sample while static destructors run at exit, and the driver releases
  // NVML's state when the process ends.
  static const auto* shared =
      new std::shared_ptr<NvmlLibrary>(std::make_shared<NvmlLibrary>(kNvmlLibrary));
  return std::make_unique<NvmlMonitor>(*shared);
}

std::unique_ptr<GpuMonitor> make_nvml_monitor(const std::string& library) {
  return std::make_unique<NvmlMonitor>(std::make_shared<NvmlLibrary>(library));
}

}  // namespace ls
