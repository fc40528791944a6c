// lockstep-doctor: is this machine fit to train with lockstep, and when a multi-GPU run froze,
// why? It prints the host, the GPUs and the versions, then one verdict line per finding:
//   host:  memory available, cores vs device threads
//   GPUs:  PCIe link width/generation, ACS on the bridges above each GPU, the IOMMU, other
//          processes and free memory, power/thermals/throttling, Xid errors in the kernel log,
//          and per pair: peer access, a timed copy, NCCL all-reduce with P2P on and off
//   all:   a known-answer all-reduce over the devices, a thread per device as training does
// Under `mpirun -np P` (P > 1) every process runs those checks on its own devices, and then the
// processes are compared (lockstep version, build, device kinds and counts, GPUs shared between
// processes) and a known-answer all-reduce runs across all of them (world_checks.h); process 0
// prints every process's findings, the others print nothing unless they cannot reach it.
// --all-reduce-only (internal) runs just the all-reduce and prints its finding as JSON: the
// child process the per-pair checks start, with and without NCCL_P2P_DISABLE=1.
// GPU checks say N/A on host devices. --json prints the findings as JSON instead.
// --flight FILE... analyses the flight recorder files of a hang or desync instead of checking
// the machine (tools/doctor/flight_analysis.h).
// Exit codes: 0 no FAIL (WARNs allowed), 1 a FAIL, 2 usage error.
#include <lockstep/lockstep.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/json.h>
#include "engine/core/gpu_monitor.h"
#include "engine/core/runtime.h"
#include "engine/core/system_info.h"
#include "programs/common/cli.h"
#include "programs/common/flags.h"
#include "parallel/mpi/mpi_runtime.h"
#include <lockstep/world.h>
#include "tools/doctor/allreduce_check.h"
#include "tools/doctor/finding.h"
#include "tools/doctor/flight_analysis.h"
#include "tools/doctor/gpu_health.h"
#include "tools/doctor/host_checks.h"
#include "tools/doctor/machine.h"
#include "tools/doctor/p2p_checks.h"
#include "tools/doctor/pci_checks.h"
#include "tools/doctor/world_checks.h"
#include "tools/doctor/xid.h"

namespace {

using ls::cli::UsageError;
using namespace ls::doctor;  // NOLINT: the doctor's own checks

struct DoctorOptions {
  std::string devices = "auto";
  std::chrono::milliseconds timeout{20000};
  bool json = false;
  bool all_reduce_only = false;  // internal: the child the P2P checks run (see p2p_checks.h)
  std::vector<std::string> flight;  // flight recorder files to analyse instead of the checks
};

// The options, or the exit code to return at once (0 after --help, 2 after a usage error).
std::variant<DoctorOptions, int> parse_options(int argc, char** argv) {
  DoctorOptions o;
  CLI::App app("Checks that this machine can train on its devices: PCIe, ACS, IOMMU, peer "
               "access, NVML sharing, power and thermals, Xid errors, and a known-answer "
               "all-reduce.",
               "lockstep-doctor");
  app.footer("Exit codes: 0 no FAIL, 1 a FAIL, 2 usage error.");
  ls::cli::add_devices(app, o.devices);
  app.add_option_function<int64_t>(
         "--timeout-ms", [&o](int64_t ms) { o.timeout = std::chrono::milliseconds(ms); },
         "how long one test collective or copy may take (default 20000)")
      ->check(ls::cli::positive());
  app.add_flag("--json", o.json, "print the findings as JSON (for machines) instead of the table");
  app.add_option("--flight", o.flight,
                 "analyse the flight recorder files a hang or desync error named (one per "
                 "process) instead of checking the machine: which replica is behind, which "
                 "collective it never issued, which sizes disagree")
      ->expected(1, -1);
  // The child the P2P checks start (p2p_checks.cpp): not for users, so not in --help.
  app.add_flag("--all-reduce-only", o.all_reduce_only)->group("");
  if (const std::optional<int> exit_code = ls::cli::parse(app, argc, argv)) return *exit_code;
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

// Prints `findings` (and the verdict) as the options say; returns the exit code.
int report(const DoctorOptions& o, const Findings& findings) {
  std::printf("%s", o.json ? findings_json(findings).c_str() : findings_table(findings).c_str());
  const Verdict verdict = overall_verdict(findings);
  if (!o.json) std::printf("\nverdict: %s\n", verdict_name(verdict));
  std::fflush(stdout);
  return verdict == Verdict::kFail ? 1 : 0;
}

void print_world(const std::vector<ProcessFacts>& facts, int replicas) {
  std::printf("world: %zu processes under mpirun, %d replicas\n", facts.size(), replicas);
  for (const ProcessFacts& p : facts) {
    std::printf("  p%d  %s  %s = replicas %d..%d  lockstep %s, %s\n", p.process, p.host.c_str(),
                p.devices.c_str(), p.first_replica, p.first_replica + p.device_count - 1,
                p.version.c_str(), p.build.c_str());
  }
  std::printf("p0's machine:\n");
}

// The world-all-reduce, or why every process skips it (the same decision everywhere: it is
// collective). `ready` is every process's "my own checks did not hang".
Finding world_all_reduce(const DoctorOptions& o, const ls::World& world,
                         const Findings& world_findings, const std::vector<ProcessFacts>& facts,
                         const std::vector<int>& ready, bool* hung) {
  Finding skipped{"world-all-reduce", ls::devices_str(world.local_devices()),
                  Verdict::kNotApplicable, "", ""};
  if (overall_verdict(world_findings) == Verdict::kFail) {
    skipped.detail = "skipped: the processes differ (see the FAIL world-* findings)";
    return skipped;
  }
  for (size_t p = 0; p < ready.size(); ++p) {
    if (ready[p] != 0) continue;
    skipped.detail = "skipped: " + facts[p].name() + " hung in its own checks (see its findings)";
    return skipped;
  }
  return known_answer_world_all_reduce(world, o.timeout, hung);
}

// Under mpirun with P > 1 processes (see the top of this file and world_checks.h). Every process
// computes the same findings from the same exchanged data, so all exit with the same code.
int run_world(const DoctorOptions& o, const ls::World& world) {
  using namespace std::chrono_literals;
  bool hung = false;
  int code = 1;
  try {
    const ls::GpuReport gpu = ls::gpu_report();
    std::vector<ProcessFacts> facts;
    for (const std::string& text :
         exchange_strings(world, encode_facts(facts_of_this_process(world, gpu)), o.timeout,
                          "lockstep-doctor: the exchange of every process's build and devices")) {
      facts.push_back(decode_facts(text));
    }
    Findings findings = check_world_facts(facts);
    Findings mine = diagnose(o, world.local_devices(), gpu, &hung);
    // The slowest process's own checks bound how long the others wait for it here.
    int most_gpus = 0;
    for (const ProcessFacts& p : facts) most_gpus = std::max(most_gpus, p.gpu_count());
    const std::vector<int> ready = ls::mpi::allgather_int(
        hung ? 0 : 1, local_checks_limit(most_gpus, o.timeout) + o.timeout,
        "lockstep-doctor: waiting for every process to finish its own checks");
    bool world_hung = false;
    mine.push_back(world_all_reduce(o, world, findings, facts, ready, &world_hung));
    hung = hung || world_hung;
    // A process may reach this up to 3 timeouts + 10 s after another (the world all-reduce:
    // NCCL's id broadcast and initialisation, then the collective, each bounded).
    const std::vector<std::string> all =
        exchange_strings(world, encode_findings(mine), 4 * o.timeout + 15s,
                         "lockstep-doctor: the exchange of every process's findings");
    // The table shows p0's findings, and of the others their problems and world-all-reduce (a
    // line counts the rest); JSON has them all. Both give the same verdict.
    Findings shown = findings;
    for (size_t p = 0; p < all.size(); ++p) {
      int quiet = 0;
      for (Finding& f : decode_findings(all[p])) {
        f.subject = ls::detail::concat("p", p, " ", f.subject);
        const bool problem = f.verdict == Verdict::kWarn || f.verdict == Verdict::kFail;
        if (p == 0 || o.json || problem || f.check == "world-all-reduce") {
          shown.push_back(f);
        } else {
          ++quiet;
        }
        findings.push_back(std::move(f));
      }
      if (quiet > 0) {
        shown.push_back({"own-checks", ls::detail::concat("p", p, " ", facts[p].host), Verdict::kOk,
                         ls::detail::concat("its other ", quiet,
                                            " finding(s) are OK or N/A (--json lists them)"),
                         ""});
      }
    }
    if (world.rank() == 0) {
      if (!o.json) {
        print_world(facts, world.replicas());
        print_machine(gpu, world.local_devices());
      }
      code = report(o, shown);
    } else {
      code = overall_verdict(findings) == Verdict::kFail ? 1 : 0;
    }
  } catch (const std::exception& e) {
    // This process cannot finish its part: it says so itself, whichever process it is, since
    // process 0 may never hear of it (mpirun shows every process's output).
    const Finding f{"doctor", world.describe(), Verdict::kFail,
                    std::string("could not finish across the processes: ") + e.what(),
                    "a process that died, hung or was stopped fails the others' exchanges; see "
                    "every process's output above"};
    code = report(o, {f});
  }
  std::fflush(stdout);
  if (hung) ::_exit(code);  // a rank stuck in the driver cannot be joined
  return code;
}

}  // namespace

// --flight: the analysis of the files (tools/doctor/flight_analysis.h). Exit 0 when it could
// read them, 2 when a file is missing or not a flight recorder file.
int analyse_flight_files(const DoctorOptions& o) {
  try {
    const FlightFiles files = read_flight_files(o.flight);
    const std::vector<std::string> findings = analyse_flight(files);
    if (o.json) {
      ls::JsonWriter json;
      json.begin_object()
          .field("replicas", static_cast<int64_t>(files.replicas.size()))
          .field("stages", static_cast<int64_t>(files.stages.size()));
      json.key("findings").begin_array();
      for (const std::string& f : findings) json.value(f);
      json.end_array().end_object();
      std::printf("%s\n", json.str().c_str());
      return 0;
    }
    if (files.stages.empty()) {
      std::printf("flight recorder: %zu replica(s) in %zu file(s) (%s)\n",
                  files.replicas.size(), o.flight.size(), files.reasons.front().c_str());
    } else {
      std::printf("flight recorder: %zu pipeline stage(s) in %zu file(s) (%s)\n",
                  files.stages.size(), o.flight.size(), files.reasons.front().c_str());
    }
    for (const std::string& f : findings) std::printf("  %s\n", f.c_str());
    return 0;
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "lockstep-doctor: %s\n", e.message().c_str());
    return ls::cli::kUsageExit;
  }
}

int main(int argc, char** argv) {
  std::variant<DoctorOptions, int> parsed = parse_options(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const DoctorOptions& options = std::get<DoctorOptions>(parsed);
  if (!options.flight.empty()) return analyse_flight_files(options);
  const std::optional<std::vector<ls::Device>> listed =
      ls::cli::devices_or_usage_error("lockstep-doctor", options.devices);
  if (!listed) return ls::cli::kUsageExit;
  const std::vector<ls::Device>& devices = *listed;
  bool hung = false;
  if (options.all_reduce_only) {
    // The parent reads this JSON finding (p2p_checks.cpp, pair_run_of).
    const Finding f = known_answer_all_reduce(devices, options.timeout, &hung);
    std::printf("%s", findings_json({f}).c_str());
    std::fflush(stdout);
    ::_exit(f.verdict == Verdict::kOk ? 0 : 1);
  }
  // Under mpirun every process joins the World (World::init reads the launcher's environment);
  // a plain run is a world of one that never touches MPI, and the doctor runs as it always did.
  std::unique_ptr<ls::WorldScope> world;
  try {
    world = std::make_unique<ls::WorldScope>(devices, ls::WorldOptions{options.timeout});
  } catch (const std::exception& e) {
    return report(options, {{"world", "host", Verdict::kFail,
                             std::string("cannot join the other processes: ") + e.what(), ""}});
  }
  if ((*world)->size() > 1) return run_world(options, **world);
  try {
    const ls::GpuReport gpu = ls::gpu_report();
    if (!options.json) print_machine(gpu, devices);
    const int code = report(options, diagnose(options, devices, gpu, &hung));
    if (hung) ::_exit(code);  // a rank stuck in the driver cannot be joined
    return code;
  } catch (const std::exception& e) {
    const Finding f{"doctor", "host", Verdict::kFail, std::string("could not finish: ") + e.what(),
                    ""};
    std::printf("%s", options.json ? findings_json({f}).c_str() : findings_table({f}).c_str());
    return 1;
  }
}
