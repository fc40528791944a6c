// Peer-to-peer checks (see p2p_checks.h). The CUDA parts (the copy, NCCL in the children) are
// compiled, not run on a GPU yet; the verdicts are tested on fixture answers.
#include "tools/doctor/p2p_checks.h"

#include <cstdio>
#include <future>

#include "engine/core/json_reader.h"

namespace ls::doctor {
namespace {

constexpr const char* kAcsGuide =
    "NCCL troubleshooting, 'PCI Access Control Services (ACS)': "
    "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html";

std::string pair_name(const GpuId& a, const GpuId& b) { return a.name() + "<->" + b.name(); }

std::string gbps_text(double gbps) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", gbps);
  return buf;
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace

double pcie_link_gbps(int generation, int width) {
  // Per lane and direction after line coding: 8b/10b for Gen1-2, 128b/130b for Gen3-5; Gen6
  // (PAM4, FLIT) about twice Gen5.
  static constexpr double kPerLane[] = {0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
  if (generation < 1 || generation > 6 || width < 1 || width > 32) return 0;
  return kPerLane[generation] * width;
}

LinkBound link_bound_of(const SystemPaths& paths, const GpuId& gpu) {
  const std::string dir = pci_device_dir(paths, gpu.pci_bus_id);
  const int generation = pcie_generation(read_attribute(dir + "/max_link_speed").value_or(""));
  const int width = pcie_width(read_attribute(dir + "/current_link_width").value_or(""));
  const double gbps = pcie_link_gbps(generation, width);
  if (gbps <= 0) return {};
  return {gbps, "PCIe Gen" + std::to_string(generation) + " x" + std::to_string(width)};
}

Finding judge_peer_copy(const GpuId& a, const GpuId& b, bool peer_access, double gbps,
                        const std::string& error, const LinkBound& link_a,
                        const LinkBound& link_b) {
  Finding f{"p2p-copy", a.name() + "->" + b.name(), Verdict::kOk, "", ""};
  const std::string access = peer_access ? "peer access yes" : "peer access no";
  if (gbps < 0) {
    f.verdict = Verdict::kFail;
    f.detail = access + "; the copy " + error;
    f.fix = std::string(
                "a copy between two GPUs that fails or hangs points at the PCIe path: "
                "check the acs and iommu findings; ") +
            kAcsGuide;
    return f;
  }
  f.detail = access + ", " + gbps_text(gbps);
  const bool both_known = link_a.gbps > 0 && link_b.gbps > 0;
  if (!both_known) {
    f.detail += " (the PCIe links are unknown: nothing to compare with)";
    return f;
  }
  const bool a_slower = link_a.gbps <= link_b.gbps;
  const double bound = a_slower ? link_a.gbps : link_b.gbps;
  const std::string bound_text =
      (a_slower ? link_a.text : link_b.text) + ", " + gbps_text(bound) + " per direction";
  if (gbps > 1.2 * bound) {
    f.detail += ", above the PCIe bound (" + bound_text + "): a faster link (NVLink)";
  } else if (gbps < 0.3 * bound) {
    f.verdict = Verdict::kWarn;
    f.detail += ", under 30% of the link (" + bound_text + ")";
    f.fix = std::string(peer_access ? ""
                                    : "without peer access the driver stages copies through "
                                      "host memory; ") +
            "peer traffic may be redirected through the CPU's root complex (ACS) or translated "
            "by the IOMMU: see the acs and iommu findings; " +
            kAcsGuide;
  } else {
    f.detail += " (link: " + bound_text + ")";
  }
  return f;
}

PairRun pair_run_of(const ChildResult& child) {
  if (child.timed_out) return {PairRun::Outcome::kHung, "the child was killed at its time limit"};
  const size_t open = child.output.find("{\"verdict\"");
  if (open == std::string::npos) {
    return {PairRun::Outcome::kFailed, "exit " + std::to_string(child.exit_code) +
                                           ", no finding printed: " + last_line(child.output)};
  }
  try {
    const JsonValue json = parse_json(child.output.substr(open), "the child's finding");
    const JsonValue& f = json.find("findings")->items().at(0);
    const std::string detail = f.find("detail")->as_string();
    if (f.find("verdict")->as_string() == "OK" && child.exit_code == 0) {
      return {PairRun::Outcome::kExact, detail};
    }
    return {detail.starts_with("hung") ? PairRun::Outcome::kHung : PairRun::Outcome::kFailed,
            detail};
  } catch (const std::exception& e) {
    return {PairRun::Outcome::kFailed, std::string("unreadable finding: ") + e.what()};
  }
}

Finding judge_pair_all_reduce(const GpuId& a, const GpuId& b, const PairRun& p2p_on,
                              const PairRun& p2p_off) {
  Finding f{"p2p-allreduce", pair_name(a, b), Verdict::kOk, "", ""};
  auto describe = [](const PairRun& r) -> std::string {
    switch (r.outcome) {
      case PairRun::Outcome::kExact: return "exact";
      case PairRun::Outcome::kHung: return "hung (" + r.detail + ")";
      case PairRun::Outcome::kFailed: return "failed (" + r.detail + ")";
    }
    return "?";
  };
  const bool on_ok = p2p_on.outcome == PairRun::Outcome::kExact;
  const bool off_ok = p2p_off.outcome == PairRun::Outcome::kExact;
  f.detail = "NCCL all-reduce with P2P: " + describe(p2p_on) +
             "; with NCCL_P2P_DISABLE=1: " + describe(p2p_off);
  if (on_ok) return f;
  f.verdict = Verdict::kFail;
  if (off_ok) {
    f.fix = std::string(
                "the peer-to-peer path between these GPUs is broken. Workaround: run "
                "with NCCL_P2P_DISABLE=1 (slower). Fix: disable PCIe ACS on the bridges "
                "between them (BIOS, or setpci as the acs finding says) and boot with "
                "iommu=pt; ") +
            kAcsGuide;
  } else {
    f.fix =
        "collectives fail even without peer-to-peer: check the driver (nvidia-smi), the "
        "kernel log (xid findings) and that no other job holds the GPUs";
  }
  return f;
}

Findings check_p2p(const GpuReport& report, const std::vector<GpuId>& gpus,
                   const std::vector<LinkBound>& links, std::chrono::milliseconds timeout,
                   bool* wedged) {
  *wedged = false;
  Findings out;
  if (gpus.size() < 2) {
    out.push_back({"p2p", gpus.empty() ? "host" : gpus[0].name(), Verdict::kNotApplicable,
                   gpus.empty() ? "no GPU" : "one GPU: no pair to check", ""});
    return out;
  }
  constexpr int64_t kCopyBytes = int64_t{256} << 20;
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = i + 1; j < gpus.size(); ++j) {
      const GpuId& a = gpus[i];
      const GpuId& b = gpus[j];
      const bool access =
          report.peer_access.size() > static_cast<size_t>(std::max(a.index, b.index)) &&
          report.peer_access[static_cast<size_t>(a.index)][static_cast<size_t>(b.index)];
      // The copy runs on a thread we can abandon: a broken P2P path can hang it in the driver.
      auto rate =
          run_abandonable([a, b] { return peer_copy_gbps(a.index, b.index, kCopyBytes); }, timeout);
      double gbps = -1;
      std::string error;
      if (!rate) {
        error = "hung (no result in " + std::to_string(timeout.count()) + " ms)";
      } else {
        try {
          gbps = rate->get();
        } catch (const std::exception& e) {
          error = std::string("failed: ") + e.what();
        }
      }
      out.push_back(judge_peer_copy(a, b, access, gbps, error, links[i], links[j]));
      if (gbps < 0 && error.starts_with("hung")) {
        *wedged = true;
        return out;
      }

      const std::vector<std::string> args = {
          "--all-reduce-only", "--devices",
          "cuda:" + std::to_string(a.index) + "," + std::to_string(b.index), "--timeout-ms",
          std::to_string(timeout.count())};
      const auto limit = timeout + std::chrono::seconds(30);  // NCCL's start-up included
      const PairRun on = pair_run_of(run_self(args, {}, limit));
      const PairRun off = pair_run_of(run_self(args, {"NCCL_P2P_DISABLE=1"}, limit));
      out.push_back(judge_pair_all_reduce(a, b, on, off));
    }
  }
  return out;
}

}  // namespace ls::doctor
