// The parts of gpu_monitor.h that are the same for every monitor: names for throttle reasons and
// compute modes, and the one spelling of a PCI bus id. The NVML monitor is nvml_monitor.cpp.
#include "engine/core/gpu_monitor.h"

#include <cstdio>
#include <optional>
#include <string_view>

namespace ls {

GpuMonitor::~GpuMonitor() = default;

std::string throttle_reason_names(uint64_t bits) {
  // NVML's nvmlClocksEventReason* bits, in their order (NVML API reference, "Clock Event
  // Reasons"; confirmed against nvml.h of API versions 11 and 13).
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {
      {kThrottleGpuIdle, "gpu idle"},
      {kThrottleApplicationsClocksSetting, "applications clocks setting"},
      {kThrottleSwPowerCap, "sw power cap"},
      {kThrottleHwSlowdown, "hw slowdown"},
      {kThrottleSyncBoost, "sync boost"},
      {kThrottleSwThermalSlowdown, "sw thermal slowdown"},
      {kThrottleHwThermalSlowdown, "hw thermal slowdown"},
      {kThrottleHwPowerBrakeSlowdown, "hw power brake slowdown"},
      {kThrottleDisplayClockSetting, "display clock setting"},
  };
  if (bits == 0) return "none";
  std::string out;
  uint64_t known = 0;
  for (const auto& entry : kNames) {
    known |= entry.bit;
    if ((bits & entry.bit) == 0) continue;
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  if ((bits & ~known) != 0) {
    char unknown[32];
    std::snprintf(unknown, sizeof unknown, "0x%llx",
                  static_cast<unsigned long long>(bits & ~known));
    if (!out.empty()) out += ", ";
    out += unknown;
  }
  return out;
}

const char* compute_mode_name(ComputeMode mode) {
  // nvidia-smi's spelling, so the fix ("nvidia-smi -c DEFAULT") reads the same as the finding.
  switch (mode) {
    case ComputeMode::kDefault: return "Default";
    case ComputeMode::kExclusiveThread: return "Exclusive_Thread";
    case ComputeMode::kProhibited: return "Prohibited";
    case ComputeMode::kExclusiveProcess: return "Exclusive_Process";
  }
  return "?";
}

namespace {

// A hex number of 1..max_digits digits that is at most max_value; nullopt otherwise.
std::optional<unsigned long> parse_hex(std::string_view text, size_t max_digits,
                                       unsigned long max_value) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  unsigned long value = 0;
  for (char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return std::nullopt;
    value = value * 16 + static_cast<unsigned long>(digit);
  }
  if (value > max_value) return std::nullopt;
  return value;
}

}  // namespace

std::string normalize_pci_bus_id(const std::string& bus_id) {
  // Forms seen: NVML "00000000:3B:00.0" (8-digit domain), CUDA "0000:3B:00.0", sysfs
  // "0000:3b:00.0", the kernel's Xid lines "0000:3b:00" (no function), and "3b:00.0" (no domain,
  // which NVML also accepts). Domains above 0xffff exist (Intel VMD): they keep all their digits.
  std::string_view text = bus_id;
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n'))
    text.remove_suffix(1);
  std::string_view function_text = "0";
  if (const size_t dot = text.rfind('.'); dot != std::string_view::npos) {
    function_text = text.substr(dot + 1);
    text = text.substr(0, dot);
  }
  std::string_view domain_text = "0";
  const size_t last_colon = text.rfind(':');
  if (last_colon == std::string_view::npos) return "";
  const size_t first_colon = text.find(':');
  if (first_colon != last_colon) {
    domain_text = text.substr(0, first_colon);
    text = text.substr(first_colon + 1);
  }
  const size_t colon = text.find(':');
  const auto domain = parse_hex(domain_text, 8, 0xffffffffUL);
  const auto bus = parse_hex(text.substr(0, colon), 2, 0xff);
  const auto device = parse_hex(text.substr(colon + 1), 2, 0x1f);
  const auto function = parse_hex(function_text, 1, 7);
  if (!domain || !bus || !device || !function) return "";
  char out[32];
  std::snprintf(out, sizeof out, "%04lx:%02lx:%02lx.%lx", *domain, *bus, *device, *function);
  return out;
}

}  // namespace ls
