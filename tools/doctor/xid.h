// Xid errors: the NVIDIA driver's reports of GPU faults in the kernel log, e.g.
//   NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
// parse_xids() reads them out of log text (pure, tested on fixtures); xid_info() says what a
// code means and what to do, after NVIDIA's Xid catalog
// (https://docs.nvidia.com/deploy/xid-errors/); read_kernel_log() fetches the log, which
// non-root users may not be allowed to read. check_xid() (gpu_health.h) turns them into findings.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/doctor/finding.h"

namespace ls::doctor {

struct XidEvent {
  std::string pci_bus_id;  // normalized, "0000:3b:00.0" (the log names no function: 0 assumed)
  int code = 0;
  int pid = -1;         // the process the driver blamed; -1 when none or "<unknown>"
  std::string process;  // its name, "" when none or unknown
  std::string message;  // the driver's text after the code, pid and name
};

// The Xid on one log line, or nullopt for a line that is not an Xid report or is malformed.
// Accepts the driver's forms since 2012: "Xid (PCI:0000:3b:00): ..." and the older
// "Xid (0000:3b:00): ...", with the MIG suffixes " GPU-I:01 GPU-CI:00" inside the parentheses,
// with or without "pid=" and "name=", after any dmesg or journalctl prefix.
std::optional<XidEvent> parse_xid_line(std::string_view line);
// Every Xid in the text, in order; other and malformed lines are skipped.
std::vector<XidEvent> parse_xids(std::string_view kernel_log);

struct XidInfo {
  int code = 0;
  const char* meaning = "";  // the catalog's description
  // kWarn: usually the application's own fault or a self-repair, the GPU is still usable;
  // kFail: hardware, power, firmware or driver: the GPU needs a reset or service.
  Verdict verdict = Verdict::kWarn;
  const char* advice = "";
};
// The table's entry for code; nullptr for a code the table does not know.
const XidInfo* xid_info(int code);

struct KernelLog {
  std::string text;               // the log since boot; empty when it could not be read
  std::string unreadable_reason;  // "" when text is the log
};
// The kernel log from `dmesg`, else `journalctl -k -b` (kernel.dmesg_restrict=1 denies dmesg to
// users without CAP_SYSLOG; the journal is open to the adm and systemd-journal groups).
KernelLog read_kernel_log();

}  // namespace ls::doctor
