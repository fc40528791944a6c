// Reading Xid errors out of the kernel log (see xid.h).
#include "tools/doctor/xid.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>

#include "engine/core/gpu_monitor.h"

namespace ls::doctor {
namespace {

// The driver prints (open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/rc/kernel_rc.c):
//   "NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u[ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s"
// where pid and name are "'<unknown>'" / "<unknown>" when no process is to blame. Older drivers
// wrote "NVRM: Xid (0000:01:00): 3, ..." and some "pid=1896, <message>" without a name.
constexpr std::string_view kMarker = "NVRM: Xid (";

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

// Takes "key=value, " off the front of rest; returns the value, or nullopt when rest does not
// start with key=.
std::optional<std::string_view> take_field(std::string_view& rest, std::string_view key) {
  if (!starts_with(rest, key)) return std::nullopt;
  const size_t end = rest.find(',');
  std::string_view value = rest.substr(key.size(), end - key.size());
  rest = end == std::string_view::npos ? std::string_view() : trim(rest.substr(end + 1));
  return trim(value);
}

}  // namespace

std::optional<XidEvent> parse_xid_line(std::string_view line) {
  const size_t marker = line.find(kMarker);
  if (marker == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(marker + kMarker.size());
  const size_t close = rest.find(')');
  if (close == std::string_view::npos) return std::nullopt;
  std::string_view where = rest.substr(0, close);  // "PCI:0000:3b:00 GPU-I:01 GPU-CI:00"
  if (starts_with(where, "PCI:")) where.remove_prefix(4);
  where = where.substr(0, where.find(' '));
  XidEvent event;
  event.pci_bus_id = normalize_pci_bus_id(std::string(where));
  if (event.pci_bus_id.empty()) return std::nullopt;
  rest = rest.substr(close + 1);
  if (!starts_with(rest, ":")) return std::nullopt;
  rest = trim(rest.substr(1));
  size_t digits = 0;
  while (digits < rest.size() && digits < 6 && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0 || (digits < rest.size() && rest[digits] != ',')) return std::nullopt;
  event.code = std::stoi(std::string(rest.substr(0, digits)));
  rest = digits < rest.size() ? trim(rest.substr(digits + 1)) : std::string_view();
  if (const auto pid = take_field(rest, "pid=")) {
    if (!pid->empty() && pid->find_first_not_of("0123456789") == std::string_view::npos &&
        pid->size() < 10)
      event.pid = std::stoi(std::string(*pid));
  }
  if (const auto name = take_field(rest, "name=")) {
    if (*name != "<unknown>") event.process = std::string(*name);
  }
  event.message = std::string(trim(rest));
  return event;
}

std::vector<XidEvent> parse_xids(std::string_view kernel_log) {
  std::vector<XidEvent> events;
  while (!kernel_log.empty()) {
    const size_t end = kernel_log.find('\n');
    if (auto event = parse_xid_line(kernel_log.substr(0, end))) events.push_back(*event);
    if (end == std::string_view::npos) break;
    kernel_log.remove_prefix(end + 1);
  }
  return events;
}

const XidInfo* xid_info(int code) {
  // Meanings: the descriptions of NVIDIA's Xid catalog
  // (https://docs.nvidia.com/deploy/xid-errors/). The WARN codes are the ones NVIDIA's Kubernetes
  // device plugin treats as "application errors: the GPU should still be healthy" (13, 31, 43, 45,
  // 109), plus the self-repairing memory events (63, 92, 94) and 154, whose message names the
  // recovery the GPU needs; every other code means the GPU needs a reset or service. The advice is
  // the catalog's resolution in words a trainer can act on.
  static constexpr XidInfo kTable[] = {
      {13, "Graphics Engine Exception", Verdict::kWarn,
       "usually the program's own kernel (out-of-range access, illegal instruction): rerun under "
       "compute-sanitizer; if different programs hit it on this GPU only, suspect the GPU"},
      {31, "GPU memory page fault", Verdict::kWarn,
       "usually the program read or wrote an invalid address: rerun under compute-sanitizer; "
       "rarely the driver or the GPU"},
      {32, "Invalid or corrupted push buffer stream", Verdict::kFail,
       "corrupted commands on the way to the GPU, usually a PCIe problem: check the PCIe link "
       "(errors, width, speed), reseat the card and its riser"},
      {43, "GPU stopped processing", Verdict::kWarn,
       "the driver stopped a channel after a fault in the program; the GPU itself is usable"},
      {45, "Preemptive cleanup, due to previous errors", Verdict::kWarn,
       "a process was torn down (killed, or after another Xid): look at the Xid logged before it"},
      {48, "Double Bit ECC Error", Verdict::kFail,
       "uncorrectable GPU memory error: reset the GPU (nvidia-smi -r) or reboot; if it comes back, "
       "the GPU needs service (RMA)"},
      {61, "Internal micro-controller breakpoint/warning", Verdict::kFail,
       "GPU firmware fault: reset the GPU or reboot; update the driver; service the GPU if it "
       "repeats"},
      {62, "Internal micro-controller halt", Verdict::kFail,
       "GPU firmware halted (driver, firmware or overheating): reset the GPU or reboot, check "
       "cooling, update the driver"},
      {63, "ECC page retirement or row remapping recording event", Verdict::kWarn,
       "a bad memory row was marked for remapping: reset the GPU or reboot when convenient so the "
       "remap takes effect"},
      {64, "ECC page retirement or row remapper recording failure", Verdict::kFail,
       "the GPU could not retire or remap bad memory: reset the GPU; if it repeats, RMA"},
      {74, "NVLink Error", Verdict::kFail,
       "an NVLink link failed (collectives over it stall or fail): reset the GPUs or reboot, check "
       "nvidia-smi nvlink -e, reseat NVLink bridges; service if it repeats"},
      {79, "GPU has fallen off the bus", Verdict::kFail,
       "the GPU stopped answering on PCIe, most often power (an overloaded or failing supply, "
       "loose or daisy-chained power cables), then the PCIe slot or riser, then heat: reboot, "
       "then check the power supply's rating for all GPUs at full load, the cables and the "
       "seating; a machine that freezes or resets under load points at power"},
      {92, "High single-bit ECC error rate", Verdict::kWarn,
       "correctable memory errors are frequent: the GPU still works, but watch it (nvidia-smi -q "
       "-d ECC) and plan service"},
      {94, "Contained ECC error", Verdict::kWarn,
       "an uncorrectable memory error hit one program, which was stopped; other programs are not "
       "affected: restart the program, reset the GPU when convenient"},
      {95, "Uncontained ECC error", Verdict::kFail,
       "an uncorrectable memory error every program on the GPU may have seen: reset the GPU or "
       "reboot before training on it again"},
      {109, "Context Switch Timeout Error", Verdict::kWarn,
       "usually the program (a kernel that did not yield); rarely the driver"},
      {119, "GSP RPC Timeout", Verdict::kFail,
       "the GPU's firmware processor (GSP) stopped answering: reset the GPU or reboot, update the "
       "driver; NVIDIA's catalog lists it for driver bugs as well as hardware"},
      {120, "GSP Error", Verdict::kFail,
       "the GPU's firmware processor (GSP) failed: reset the GPU or reboot, update the driver"},
      {154, "GPU recovery action changed", Verdict::kWarn,
       "the driver names, in the message, what the GPU now needs (none, a GPU reset, a reboot): "
       "do that before training on it"},
  };
  for (const XidInfo& info : kTable) {
    if (info.code == code) return &info;
  }
  return nullptr;
}

namespace {

struct CommandResult {
  int status = -1;  // the exit status, -1 when it did not run or ended by a signal
  std::string output;
};

CommandResult run_command(const char* command) {
  CommandResult result;
  FILE* pipe = popen(command, "r");
  if (pipe == nullptr) return result;
  char buffer[1 << 16];
  size_t got = 0;
  constexpr size_t kMaxBytes = size_t{256} << 20;  // the log since boot; bounded all the same
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    if (result.output.size() < kMaxBytes) result.output.append(buffer, got);
  }
  const int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) result.status = WEXITSTATUS(status);
  return result;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

KernelLog read_kernel_log() {
  KernelLog log;
  const CommandResult dmesg = run_command("dmesg 2>&1");
  if (dmesg.status == 0 && !dmesg.output.empty()) {
    log.text = dmesg.output;
    return log;
  }
  // journalctl prints nothing (or only a notice) when the user may not read the kernel's
  // messages; a real kernel log is never empty, so an empty one counts as unreadable.
  const CommandResult journal = run_command("journalctl -k -b --no-pager -q 2>/dev/null");
  const bool has_lines = std::count(journal.output.begin(), journal.output.end(), '\n') >= 2;
  if (journal.status == 0 && has_lines && !starts_with(journal.output, "-- No entries")) {
    log.text = journal.output;
    return log;
  }
  log.unreadable_reason = "kernel log not readable (dmesg: " + first_line(dmesg.output) +
                          "; journalctl -k gave nothing): run as root, or as a member of the adm "
                          "or systemd-journal group";
  return log;
}

}  // namespace ls::doctor
