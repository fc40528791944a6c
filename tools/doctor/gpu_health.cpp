// The sharing, gpu-memory, power-thermal and xid checks (see gpu_health.h).
#include "tools/doctor/gpu_health.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>

namespace ls::doctor {
namespace {

constexpr const char* kXidCatalog = "https://docs.nvidia.com/deploy/xid-errors/";

Finding finding(const char* check, const std::string& subject, Verdict verdict, std::string detail,
                std::string fix = "") {
  return Finding{check, subject, verdict, std::move(detail), std::move(fix)};
}

// The one N/A finding of a check that cannot run here, or nullopt when it can.
std::optional<Findings> cannot_run(const char* check, const GpuMonitor* monitor,
                                   const std::vector<GpuId>& gpus) {
  if (gpus.empty()) {
    return Findings{finding(check, "host", Verdict::kNotApplicable, "no GPU")};
  }
  if (monitor != nullptr && !monitor->unavailable_reason().empty()) {
    return Findings{finding(check, "host", Verdict::kNotApplicable, monitor->unavailable_reason())};
  }
  return std::nullopt;
}

// "pid 4242 (python, 20.0 GiB)"
std::string describe(const GpuProcess& p) {
  std::string text = "pid " + std::to_string(p.pid);
  std::string about = p.name;
  if (p.used_memory_bytes >= 0)
    about += (about.empty() ? "" : ", ") + gib_text(p.used_memory_bytes);
  return about.empty() ? text : text + " (" + about + ")";
}

std::string describe(const std::vector<GpuProcess>& processes) {
  std::string text;
  for (const GpuProcess& p : processes) text += (text.empty() ? "" : ", ") + describe(p);
  return text;
}

std::vector<GpuProcess> others(const std::optional<std::vector<GpuProcess>>& processes,
                               pid_t self) {
  std::vector<GpuProcess> out;
  if (!processes) return out;
  for (const GpuProcess& p : *processes) {
    if (p.pid != self) out.push_back(p);
  }
  return out;
}

Finding sharing_of(GpuMonitor& monitor, const GpuId& gpu, pid_t self) {
  constexpr const char* kCheck = "sharing";
  const std::optional<ComputeMode> mode = monitor.compute_mode(gpu.pci_bus_id);
  const std::optional<std::vector<GpuProcess>> processes = monitor.processes(gpu.pci_bus_id);
  const std::vector<GpuProcess> other = others(processes, self);
  const std::string mode_text =
      "compute mode " + std::string(mode ? compute_mode_name(*mode) : "unknown");
  // nvidia-smi numbers GPUs in PCI order, CUDA fastest first: name the GPU by its bus id.
  const std::string smi = "nvidia-smi -i " + gpu.pci_bus_id;
  if (mode == ComputeMode::kProhibited) {
    return finding(kCheck, gpu.name(), Verdict::kFail,
                   mode_text + ": no process may create a CUDA context on it",
                   "allow compute: sudo " + smi + " -c DEFAULT, or leave this GPU out (--devices)");
  }
  const bool exclusive =
      mode == ComputeMode::kExclusiveProcess || mode == ComputeMode::kExclusiveThread;
  if (exclusive && !other.empty()) {
    return finding(kCheck, gpu.name(), Verdict::kFail,
                   mode_text + " and it is held by " + describe(other) +
                       ": lockstep cannot create its context",
                   "wait for that process to end or stop it, or leave this GPU out (--devices); "
                   "sudo " +
                       smi + " -c DEFAULT lets processes share it");
  }
  if (!other.empty()) {
    return finding(kCheck, gpu.name(), Verdict::kWarn,
                   "shared with " + describe(other) + "; " + mode_text,
                   "a GPU shared with another job: collectives wait on its kernels; stragglers "
                   "look like hangs. Stop the other job or leave this GPU out (--devices)");
  }
  if (!processes) {
    return finding(kCheck, gpu.name(), Verdict::kNotApplicable,
                   "the driver would not list the GPU's processes; " + mode_text);
  }
  return finding(kCheck, gpu.name(), Verdict::kOk, "no other compute process; " + mode_text);
}

Finding memory_of(GpuMonitor& monitor, const GpuId& gpu, pid_t self) {
  constexpr const char* kCheck = "gpu-memory";
  const std::optional<GpuSample> s = monitor.sample(gpu.pci_bus_id);
  if (!s || s->memory_total_bytes <= 0) {
    return finding(kCheck, gpu.name(), Verdict::kNotApplicable,
                   "the driver does not report this GPU's memory");
  }
  const int64_t total = s->memory_total_bytes;
  const int64_t free_bytes = s->memory_free_bytes >= 0
                                 ? s->memory_free_bytes
                                 : total - std::max<int64_t>(0, s->memory_used_bytes);
  std::string detail = gib_text(free_bytes) + " free of " + gib_text(total);
  const bool low = free_bytes < kLowFreeBytes ||
                   static_cast<double>(free_bytes) < kLowFreeFraction * static_cast<double>(total);
  if (!low) return finding(kCheck, gpu.name(), Verdict::kOk, detail);
  std::vector<GpuProcess> holders = others(monitor.processes(gpu.pci_bus_id), self);
  std::sort(holders.begin(), holders.end(), [](const GpuProcess& a, const GpuProcess& b) {
    return a.used_memory_bytes > b.used_memory_bytes;
  });
  if (!holders.empty()) detail += "; held by " + describe(holders);
  return finding(kCheck, gpu.name(), Verdict::kWarn, detail,
                 "lockstep allocates its buffers up front and fails when they do not fit: free "
                 "the memory (stop the processes holding it) or leave this GPU out (--devices)");
}

Finding power_thermal_of(GpuMonitor& monitor, const GpuId& gpu) {
  constexpr const char* kCheck = "power-thermal";
  const std::optional<GpuSample> s = monitor.sample(gpu.pci_bus_id);
  if (!s) {
    return finding(kCheck, gpu.name(), Verdict::kNotApplicable,
                   monitor.device_error(gpu.pci_bus_id));
  }
  std::vector<std::string> seen;
  char text[96];
  if (s->power_w >= 0 && s->power_limit_w > 0) {
    std::snprintf(text, sizeof text, "%.0f W of %.0f W", s->power_w, s->power_limit_w);
    seen.push_back(text);
  } else if (s->power_w >= 0) {
    std::snprintf(text, sizeof text, "%.0f W", s->power_w);
    seen.push_back(text);
  }
  if (s->temperature_c >= 0) seen.push_back(std::to_string(s->temperature_c) + " C");
  if (s->sm_clock_mhz >= 0 && s->max_sm_clock_mhz > 0) {
    std::snprintf(text, sizeof text, "SM %d of %d MHz", s->sm_clock_mhz, s->max_sm_clock_mhz);
    seen.push_back(text);
  }
  seen.push_back("clocks held by: " + (s->throttle_reasons_known
                                           ? throttle_reason_names(s->throttle_reasons)
                                           : std::string("unknown")));
  std::string detail;
  for (const std::string& part : seen) detail += (detail.empty() ? "" : ", ") + part;

  // Each problem adds its advice; the verdict is the worst of them. From NVML's descriptions of
  // the clock event reasons: HW slowdown cuts the clocks by 2x or more, for heat or for power
  // (a power brake is asserted by the system's power supply).
  const uint64_t bits = s->throttle_reasons_known ? s->throttle_reasons : 0;
  Verdict verdict = Verdict::kOk;
  std::string fix;
  auto problem = [&](Verdict v, const std::string& advice) {
    if (v == Verdict::kFail || verdict == Verdict::kOk) verdict = v;
    fix += (fix.empty() ? "" : " ") + advice;
  };
  if (bits & kThrottleHwThermalSlowdown) {
    problem(Verdict::kFail,
            "Overheating: the hardware cut the clocks; check fans, airflow, inlet temperature and "
            "dust.");
  }
  if (bits & kThrottleHwPowerBrakeSlowdown) {
    problem(Verdict::kFail,
            "Power brake: the power supply told the GPU to slow down; check its rating for every "
            "GPU at full load and the GPU power cables (one per connector, fully seated).");
  }
  if ((bits & kThrottleHwSlowdown) &&
      !(bits & (kThrottleHwThermalSlowdown | kThrottleHwPowerBrakeSlowdown))) {
    problem(Verdict::kFail,
            "HW slowdown (heat, or power above what the board or supply allows): check cooling, "
            "the power supply and the GPU power cables.");
  }
  if (verdict == Verdict::kFail) {
    fix +=
        " Whole-machine freezes or resets under load come from power, not from software. "
        "Watch it live: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE.";
  }
  if (bits & kThrottleSwThermalSlowdown) {
    problem(Verdict::kWarn,
            "SW thermal slowdown: the driver holds the clocks down to stay under the GPU's "
            "temperature limit; improve cooling.");
  }
  const bool at_cap =
      s->power_w >= 0 && s->power_limit_w > 0 && s->power_w >= kPowerCapFraction * s->power_limit_w;
  if ((bits & kThrottleSwPowerCap) || at_cap) {
    problem(Verdict::kWarn,
            "At its power limit: clocks drop to stay under it. Expected at full load on some "
            "boards; if the enforced limit is below the default (nvidia-smi -q -d POWER), raise "
            "it: sudo nvidia-smi -i " +
                gpu.pci_bus_id + " -pl <watts>.");
  }
  if (s->temperature_c >= kHotCelsius && !(bits & kThrottleHwThermalSlowdown)) {
    problem(Verdict::kWarn, "Hot (" + std::to_string(s->temperature_c) +
                                " C): near where GPUs slow down; check cooling.");
  }
  return finding(kCheck, gpu.name(), verdict, detail, fix);
}

// The findings of one GPU's Xids: codes ordered FAIL first, then by first appearance.
Finding xid_of(const GpuId& gpu, const std::vector<XidEvent>& events) {
  constexpr const char* kCheck = "xid";
  if (events.empty()) return finding(kCheck, gpu.name(), Verdict::kOk, "no Xid in the kernel log");
  std::vector<int> codes;
  std::map<int, int> counts;
  std::map<int, std::string> last_message;
  for (const XidEvent& e : events) {
    if (counts[e.code]++ == 0) codes.push_back(e.code);
    last_message[e.code] = e.message;
  }
  auto failing = [](int code) {
    const XidInfo* info = xid_info(code);
    return info != nullptr && info->verdict == Verdict::kFail;
  };
  std::stable_partition(codes.begin(), codes.end(), failing);
  Verdict verdict = Verdict::kWarn;
  std::string detail, fix;
  for (int code : codes) {
    const XidInfo* info = xid_info(code);
    if (info != nullptr && info->verdict == Verdict::kFail) verdict = Verdict::kFail;
    // The driver's message is quoted where the code alone does not say enough: a code the table
    // lacks, and Xid 154, whose message names the recovery the GPU needs.
    std::string about = info != nullptr ? info->meaning : "not in lockstep's table";
    if ((info == nullptr || code == 154) && !last_message[code].empty())
      about += ": '" + last_message[code] + "'";
    detail += (detail.empty() ? "" : "; ") + std::string("Xid ") + std::to_string(code) + " x" +
              std::to_string(counts[code]) + " (" + about + ")";
    fix += "Xid " + std::to_string(code) + ": " +
           (info != nullptr ? info->advice : "look it up in NVIDIA's Xid catalog") + ". ";
  }
  fix += std::string("Source: NVIDIA's Xid catalog, ") + kXidCatalog;
  return finding(kCheck, gpu.name(), verdict, detail, fix);
}

}  // namespace

Findings check_sharing(GpuMonitor& monitor, const std::vector<GpuId>& gpus, pid_t self) {
  if (auto na = cannot_run("sharing", &monitor, gpus)) return *na;
  Findings out;
  for (const GpuId& gpu : gpus) {
    const std::string error = monitor.device_error(gpu.pci_bus_id);
    out.push_back(error.empty() ? sharing_of(monitor, gpu, self)
                                : finding("sharing", gpu.name(), Verdict::kNotApplicable, error));
  }
  return out;
}

Findings check_memory(GpuMonitor& monitor, const std::vector<GpuId>& gpus, pid_t self) {
  if (auto na = cannot_run("gpu-memory", &monitor, gpus)) return *na;
  Findings out;
  for (const GpuId& gpu : gpus) {
    const std::string error = monitor.device_error(gpu.pci_bus_id);
    out.push_back(error.empty()
                      ? memory_of(monitor, gpu, self)
                      : finding("gpu-memory", gpu.name(), Verdict::kNotApplicable, error));
  }
  return out;
}

Findings check_power_thermal(GpuMonitor& monitor, const std::vector<GpuId>& gpus) {
  if (auto na = cannot_run("power-thermal", &monitor, gpus)) return *na;
  Findings out;
  for (const GpuId& gpu : gpus) out.push_back(power_thermal_of(monitor, gpu));
  return out;
}

Findings check_xid(const KernelLog& log, const std::vector<GpuId>& gpus) {
  if (auto na = cannot_run("xid", nullptr, gpus)) return *na;
  if (!log.unreadable_reason.empty()) {
    return {finding("xid", "host", Verdict::kNotApplicable, log.unreadable_reason)};
  }
  const std::vector<XidEvent> events = parse_xids(log.text);
  Findings out;
  for (const GpuId& gpu : gpus) {
    const std::string bus_id = normalize_pci_bus_id(gpu.pci_bus_id);
    std::vector<XidEvent> mine;
    for (const XidEvent& e : events) {
      if (!bus_id.empty() && e.pci_bus_id == bus_id) mine.push_back(e);
    }
    out.push_back(xid_of(gpu, mine));
  }
  return out;
}

}  // namespace ls::doctor
