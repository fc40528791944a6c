// What the GPU driver reports about a GPU while it runs: power draw against its limit,
// temperature, SM clock against its maximum, why the clocks are held down, memory, the other
// processes using it and its compute mode. lockstep-doctor reads it once; training telemetry may
// sample it every few seconds from any thread.
//
// Contract: GpuMonitor is an interface so tests can answer with fixtures; make_nvml_monitor() is
// the real one, backed by NVML loaded at run time. NVML is never required: without it (no
// driver, no GPU, a CPU-only machine) the monitor says why in unavailable_reason() and every
// query answers "unknown" (nullopt). Implementations are thread-safe; queries are cheap (no
// allocation on the device, no CUDA context) and never throw.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ls {

// One reading of a GPU. Each number is kUnknown (-1) where the GPU or driver cannot report it
// (NVML answers "not supported" for power on some boards, for clocks on some virtual GPUs).
struct GpuSample {
  static constexpr int kUnknown = -1;
  double power_w = kUnknown;        // board power draw (NVML: averaged over 1 s on Ampere+)
  double power_limit_w = kUnknown;  // the enforced power limit: the draw is capped here
  int temperature_c = kUnknown;     // GPU die
  int sm_clock_mhz = kUnknown;
  int max_sm_clock_mhz = kUnknown;
  bool throttle_reasons_known = false;
  uint64_t throttle_reasons = 0;  // kThrottle* bits: why the clocks are below their maximum now
  int64_t memory_used_bytes = kUnknown;
  int64_t memory_free_bytes = kUnknown;
  int64_t memory_total_bytes = kUnknown;
};

// The bits of GpuSample::throttle_reasons, as NVML defines them (nvmlClocksEventReason*, formerly
// nvmlClocksThrottleReason*; the values never changed). More than one can be set at once.
inline constexpr uint64_t kThrottleGpuIdle = 0x1;
inline constexpr uint64_t kThrottleApplicationsClocksSetting = 0x2;
inline constexpr uint64_t kThrottleSwPowerCap = 0x4;
inline constexpr uint64_t kThrottleHwSlowdown = 0x8;  // clocks cut by 2x or more: heat or power
inline constexpr uint64_t kThrottleSyncBoost = 0x10;
inline constexpr uint64_t kThrottleSwThermalSlowdown = 0x20;
inline constexpr uint64_t kThrottleHwThermalSlowdown = 0x40;
inline constexpr uint64_t kThrottleHwPowerBrakeSlowdown = 0x80;  // asserted by the power supply
inline constexpr uint64_t kThrottleDisplayClockSetting = 0x100;

// "sw power cap, hw thermal slowdown"; "none" for 0; unknown bits as "0x200".
std::string throttle_reason_names(uint64_t bits);

// A process with a compute context on a GPU.
struct GpuProcess {
  pid_t pid = 0;                   // as the driver sees it: the host's pid, also inside a container
  int64_t used_memory_bytes = -1;  // -1 when not reported
  std::string name;                // the driver's name for it, "" when unknown
};

// NVML's nvmlComputeMode_t: who may create a CUDA context on the GPU.
enum class ComputeMode {
  kDefault = 0,           // any number of processes
  kExclusiveThread = 1,   // one context, one thread (removed from current drivers)
  kProhibited = 2,        // no process at all
  kExclusiveProcess = 3,  // one process, any number of its threads
};
const char* compute_mode_name(ComputeMode mode);  // "Default", "Exclusive_Process", ...

// The form every GPU bus id is compared in: "0000:3b:00.0" (lowercase, 4-digit domain, as sysfs
// writes it). Accepts NVML's "00000000:3B:00.0", CUDA's "0000:3B:00.0" and the kernel log's
// "0000:3b:00" (function 0 assumed). Returns "" for text that is not a bus id.
std::string normalize_pci_bus_id(const std::string& bus_id);

class GpuMonitor {
 public:
  virtual ~GpuMonitor();

  // "" when the monitor can answer; otherwise why not ("libnvidia-ml.so.1 not found: ...").
  virtual std::string unavailable_reason() const = 0;
  // "" when the GPU at pci_bus_id (any form normalize_pci_bus_id accepts) can be queried;
  // otherwise why not ("NVML has no GPU at 0000:3b:00.0 (Not Found)").
  virtual std::string device_error(const std::string& pci_bus_id) = 0;
  // One reading; nullopt when the GPU cannot be queried at all (see device_error).
  virtual std::optional<GpuSample> sample(const std::string& pci_bus_id) = 0;
  // The processes with a compute context on the GPU (the caller's own included); nullopt when
  // they cannot be listed (e.g. no permission), which is not the same as none.
  virtual std::optional<std::vector<GpuProcess>> processes(const std::string& pci_bus_id) = 0;
  virtual std::optional<ComputeMode> compute_mode(const std::string& pci_bus_id) = 0;
};

// The monitor backed by NVML (libnvidia-ml.so.1, installed with the NVIDIA driver), loaded with
// dlopen on first use and initialised once per process; every monitor this returns shares it.
// Never fails: without NVML the monitor is unavailable and says why.
std::unique_ptr<GpuMonitor> make_nvml_monitor();
// The same from a given library file, loaded and initialised for this monitor alone (tests use
// it to see a missing library or a library that is not NVML reported, not crashed on).
std::unique_ptr<GpuMonitor> make_nvml_monitor(const std::string& library);

}  // namespace ls
