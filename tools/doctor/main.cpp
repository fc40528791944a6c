// lockstep-doctor: is this machine fit to train with lockstep, and when a multi-GPU run froze,
// why? It prints the host, the GPUs and the versions, then one verdict line per finding:
//   host:  memory available, cores vs device threads
//   GPUs:  PCIe link width/generation, ACS on the bridges above each GPU, the IOMMU, other
//          processes and free memory, power/thermals/throttling, Xid errors in the kernel log,
//          and per pair: peer access, a timed copy, NCCL all-reduce with P2P on and off
//   all:   a known-answer all-reduce over the devices, a thread per device as training does
// --all-reduce-only (internal) runs just the all-reduce and prints its finding as JSON: the
// child process the per-pair checks start, with and without NCCL_P2P_DISABLE=1.
// GPU checks say N/A on host devices. --json prints the findings as JSON instead.
// Exit codes: 0 no FAIL (WARNs allowed), 1 a FAIL, 2 usage error.
#include <lockstep/lockstep.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/gpu_monitor.h"
#include "engine/core/runtime.h"
#include "engine/core/system_info.h"
#include "examples/cli_values.h"
#include "tools/doctor/allreduce_check.h"
#include "tools/doctor/finding.h"
#include "tools/doctor/gpu_health.h"
#include "tools/doctor/host_checks.h"
#include "tools/doctor/machine.h"
#include "tools/doctor/p2p_checks.h"
#include "tools/doctor/pci_checks.h"
#include "tools/doctor/xid.h"

namespace {

using ls::cli::UsageError;
using namespace ls::doctor;  // NOLINT: the doctor's own checks

constexpr const char* kUsage =
    "usage: lockstep-doctor [--devices SPEC] [--timeout-ms N] [--json]\n"
    "  --devices SPEC   devices to check (default auto: every GPU, else one host device per core)\n"
    "  --timeout-ms N   how long one test collective or copy may take (default 20000)\n"
    "  --json           print the findings as JSON (for machines) instead of the table\n"
    "Exit codes: 0 no FAIL, 1 a FAIL, 2 usage error.\n";

struct DoctorOptions {
  std::string devices = "auto";
  std::chrono::milliseconds timeout{20000};
  bool json = false;
  bool all_reduce_only = false;  // internal: the child the P2P checks run (see p2p_checks.h)
  bool help = false;
};

DoctorOptions parse_options(int argc, char** argv) {
  DoctorOptions o;
  const std::map<std::string_view, ls::cli::FlagSetter> flags = {
      {"--devices", [&](auto, auto v) { o.devices = v; }},
      {"--timeout-ms",
       [&](auto f, auto v) {
         o.timeout = std::chrono::milliseconds(ls::cli::parse_positive<int64_t>(f, v));
       }},
  };
  ls::cli::parse_flags(argc, argv, flags,
                       {{"-h", [&] { o.help = true; }},
                        {"--help", [&] { o.help = true; }},
                        {"--json", [&] { o.json = true; }},
                        {"--all-reduce-only", [&] { o.all_reduce_only = true; }}});
  return o;
}

void print_machine(const ls::GpuReport& gpu, const std::vector<ls::Device>& devices) {
  const ls::HostInfo host = ls::host_info();
  std::printf("host: %s, %d core(s), %.1f GiB\n", host.cpu_model.c_str(), host.cores,
              static_cast<double>(host.memory_bytes) / (1 << 30));
  std::printf("cuda: %s", ls::built_with_cuda() ? "built in" : "not built in");
  if (!gpu.driver_version.empty()) std::printf(", driver %s", gpu.driver_version.c_str());
  if (!gpu.runtime_version.empty()) std::printf(", runtime %s", gpu.runtime_version.c_str());
  if (!gpu.nccl_version.empty()) std::printf(", NCCL %s", gpu.nccl_version.c_str());
  std::printf("\n");
  if (gpu.gpus.empty()) std::printf("gpus: none (%s)\n", gpu.unavailable_reason.c_str());
  for (const ls::GpuInfo& g : gpu.gpus) {
    std::printf("  cuda:%d  %s  %.1f GiB  %s\n", g.index, g.name.c_str(),
                static_cast<double>(g.memory_bytes) / (1 << 30), g.pci_bus_id.c_str());
  }
  if (gpu.gpus.size() > 1) {
    std::printf("peer access (row can read column directly):\n       ");
    for (size_t j = 0; j < gpu.gpus.size(); ++j) std::printf(" %4zu", j);
    std::printf("\n");
    for (size_t i = 0; i < gpu.gpus.size(); ++i) {
      std::printf("  %4zu ", i);
      for (size_t j = 0; j < gpu.gpus.size(); ++j)
        std::printf(" %4s", gpu.peer_access[i][j] ? "yes" : "no");
      std::printf("\n");
    }
  }
  std::printf("checking: %s\n\n", ls::devices_str(devices).c_str());
  std::fflush(stdout);
}

// The GPUs among `devices`, with their PCI bus ids from the report.
std::vector<GpuId> gpus_of(const std::vector<ls::Device>& devices, const ls::GpuReport& report) {
  std::vector<GpuId> gpus;
  for (const ls::Device& d : devices) {
    if (d.is_cuda()) gpus.push_back({d.index, ls::pci_bus_id_of(report, d.index)});
  }
  return gpus;
}

Findings diagnose(const DoctorOptions& o, const std::vector<ls::Device>& devices,
                  const ls::GpuReport& report, bool* hung) {
  Findings findings;
  findings.push_back(check_host_memory("/proc/meminfo"));
  findings.push_back(check_cores(devices, ls::host_core_count(), 1, numa_node_count("/sys")));
  const std::vector<GpuId> gpus = gpus_of(devices, report);
  const SystemPaths paths;
  auto add = [&](Findings more) {
    for (Finding& f : more) findings.push_back(std::move(f));
  };
  // NVML first, before any check makes a CUDA context: inside a container the driver reports
  // host pids, and the doctor's own context would look like another job on the GPU.
  const std::unique_ptr<ls::GpuMonitor> monitor = ls::make_nvml_monitor();
  add(check_sharing(*monitor, gpus, ::getpid()));
  add(check_memory(*monitor, gpus, ::getpid()));
  add(check_power_thermal(*monitor, gpus));
  add(check_xid(gpus.empty() ? KernelLog{} : read_kernel_log(), gpus));
  add(check_pcie_links(paths, gpus));
  add(check_acs(paths, gpus));
  add(check_iommu(paths, gpus));
  std::vector<LinkBound> links;
  for (const GpuId& gpu : gpus) links.push_back(link_bound_of(paths, gpu));
  bool wedged = false;
  add(check_p2p(report, gpus, links, o.timeout, &wedged));
  if (wedged) {
    *hung = true;
    findings.push_back({"all-reduce", ls::devices_str(devices), Verdict::kNotApplicable,
                        "skipped: a GPU copy hung in the driver, so no collective can run in this "
                        "process (see the p2p-copy finding)",
                        ""});
    return findings;
  }
  findings.push_back(known_answer_all_reduce(devices, o.timeout, hung));
  return findings;
}

}  // namespace

int main(int argc, char** argv) {
  DoctorOptions options;
  std::vector<ls::Device> devices;
  try {
    options = parse_options(argc, argv);
    if (!options.help) devices = ls::cli::parse_devices_flag("--devices", options.devices);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "lockstep-doctor: %s\n%s", e.what(), kUsage);
    return 2;
  }
  if (options.help) {
    std::printf("%s", kUsage);
    return 0;
  }
  bool hung = false;
  if (options.all_reduce_only) {
    // The parent reads this JSON finding (p2p_checks.cpp, pair_run_of).
    const Finding f = known_answer_all_reduce(devices, options.timeout, &hung);
    std::printf("%s", findings_json({f}).c_str());
    std::fflush(stdout);
    ::_exit(f.verdict == Verdict::kOk ? 0 : 1);
  }
  try {
    const ls::GpuReport report = ls::gpu_report();
    if (!options.json) print_machine(report, devices);
    const Findings findings = diagnose(options, devices, report, &hung);
    std::printf("%s",
                options.json ? findings_json(findings).c_str() : findings_table(findings).c_str());
    const Verdict verdict = overall_verdict(findings);
    if (!options.json) std::printf("\nverdict: %s\n", verdict_name(verdict));
    std::fflush(stdout);
    const int code = verdict == Verdict::kFail ? 1 : 0;
    if (hung) ::_exit(code);  // a rank stuck in the driver cannot be joined
    return code;
  } catch (const std::exception& e) {
    const Finding f{"doctor", "host", Verdict::kFail, std::string("could not finish: ") + e.what(),
                    ""};
    std::printf("%s", options.json ? findings_json({f}).c_str() : findings_table({f}).c_str());
    return 1;
  }
}
