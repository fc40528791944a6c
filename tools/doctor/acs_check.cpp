// The ACS check (see pci_checks.h): which bridges lie on a peer-to-peer path between two GPUs,
// and does any of them redirect that traffic to the root complex?
//
// Note [Which bridges' ACS matters]: sysfs nests each device below the bridges it sits behind,
// so the bridges above a GPU, root port first, are a chain. Two GPUs' chains share a prefix up to
// their lowest common bridge (a switch's upstream port, say); peer traffic between them enters
// the bridges after that prefix (the switch's downstream ports) and, with ReqRedir or CmpltRedir
// set there, is sent up to the root complex instead of across the switch: the NCCL hang or
// crawl. GPUs whose chains share no bridge meet only at the root complex, where their traffic
// goes anyway, so redirect bits on their root ports change nothing.
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "tools/doctor/pci_checks.h"
#include "tools/doctor/pci_config.h"
#include "tools/doctor/pci_sysfs.h"

namespace ls::doctor {

namespace {

struct Bridge {
  std::string address;             // "0000:16:00.0"
  std::string dir;                 // its sysfs directory, which holds its config space
  std::vector<size_t> gpus_below;  // indices into the checked GPUs
  std::set<std::pair<size_t, size_t>> peer_paths;  // GPU pairs whose P2P traffic enters it
};

std::string gpu_list(const std::vector<GpuId>& gpus, const std::vector<size_t>& which) {
  std::string out;
  for (size_t i : which) out += (out.empty() ? "" : ", ") + gpus[i].name();
  return out;
}

std::string pair_list(const std::vector<GpuId>& gpus,
                      const std::set<std::pair<size_t, size_t>>& pairs) {
  std::string out;
  for (const auto& [a, b] : pairs)
    out += (out.empty() ? "" : ", ") + gpus[a].name() + "<->" + gpus[b].name();
  return out;
}

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%x", v);
  return text;
}

std::string acs_fix(const Bridge& b, const AcsRead& read, bool from_config) {
  std::string fix = "sudo setpci -s " + b.address + " ECAP_ACS+0x6.w=0000";
  if (from_config)  // an old setpci without the ECAP_ACS name takes the register's offset
    fix += " (older setpci: " + hex(read.cap_offset + 6) + ".w=0000)";
  fix +=
      ", which lasts until the next reboot (run it at every boot), or disable ACS / IO "
      "virtualization (VT-d) for the PCIe switches in the BIOS. Until then NCCL_P2P_DISABLE=1 "
      "avoids the hang at the cost of bandwidth. See the NCCL troubleshooting guide, PCI Access "
      "Control Services: ";
  return fix + kNcclAcsGuide;
}

Finding bridge_finding(const std::vector<GpuId>& gpus, const Bridge& b, const AcsRead& read,
                       bool from_config) {
  Finding f{"acs", b.address, Verdict::kOk, "", ""};
  const std::string above = "above " + gpu_list(gpus, b.gpus_below);
  if (read.status == AcsRead::Status::kNoAcs) {
    f.detail = "no ACS capability, so nothing to redirect; " + above;
    return f;
  }
  if (read.status != AcsRead::Status::kFound) {
    f.verdict = Verdict::kNotApplicable;
    f.detail = "cannot read ACS: " + read.why + "; " + above;
    return f;
  }
  const std::string control = "ACSCtl " + read.control.describe() + " (from " +
                              (from_config ? "config space" : "lspci -vvv") + ")";
  if (b.peer_paths.empty()) {
    // See Note [Which bridges' ACS matters].
    f.detail = control + "; " + above +
               (read.control.redirects_peer_traffic()
                    ? ": redirects, but no peer-to-peer path between the checked GPUs enters it"
                    : ": no redirect");
    return f;
  }
  const std::string on_path = "on the peer-to-peer path " + pair_list(gpus, b.peer_paths);
  if (read.control.redirects_peer_traffic()) {
    f.verdict = Verdict::kFail;
    const uint16_t bits = read.control.bits;
    std::string which;
    if (bits & AcsControl::kReqRedir) which += "ReqRedir+ ";
    if (bits & AcsControl::kCmpltRedir) which += "CmpltRedir+ ";
    f.detail = which + on_path +
               ": peer-to-peer traffic is redirected to the root complex, so NCCL hangs or "
               "crawls; " +
               control;
    f.fix = acs_fix(b, read, from_config);
  } else if (read.control.egress_control()) {
    f.verdict = Verdict::kWarn;
    f.detail = "EgressCtrl+ " + on_path +
               ": P2P egress control may block or redirect peer traffic; " + control;
    f.fix = acs_fix(b, read, from_config);
  } else {
    f.detail = control + " " + on_path + ": no redirect";
  }
  return f;
}

// The bridges above the GPUs, each with the GPU pairs whose peer traffic enters it. A GPU not
// in sysfs, or with no bridge above it, gets a finding of its own in out.
std::vector<Bridge> bridges_above(const SystemPaths& paths, const std::vector<GpuId>& gpus,
                                  Findings& out) {
  std::vector<Bridge> bridges;
  std::map<std::string, size_t> index;                        // address -> bridges[]
  std::vector<std::vector<std::string>> chains(gpus.size());  // bridges above each GPU, root first
  std::vector<bool> found(gpus.size(), false);
  for (size_t g = 0; g < gpus.size(); ++g) {
    const std::optional<PciAncestry> ancestry = pci_ancestry(paths, gpus[g].pci_bus_id);
    if (!ancestry) {
      out.push_back(Finding{"acs", gpus[g].name(), Verdict::kNotApplicable,
                            "cannot find '" + gpus[g].pci_bus_id + "' in " + paths.sys_root +
                                "/bus/pci/devices, so not the bridges above it either",
                            ""});
      continue;
    }
    found[g] = true;
    chains[g] = ancestry->bridges;
    if (chains[g].empty())
      out.push_back(Finding{"acs", gpus[g].name(), Verdict::kOk,
                            "no PCI bridge above it (on the root complex): nothing to redirect",
                            ""});
    for (size_t k = 0; k < chains[g].size(); ++k) {
      auto [it, added] = index.emplace(chains[g][k], bridges.size());
      if (added) bridges.push_back(Bridge{chains[g][k], ancestry->bridge_dirs[k], {}, {}});
      bridges[it->second].gpus_below.push_back(g);
    }
  }
  // See Note [Which bridges' ACS matters].
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = a + 1; b < gpus.size(); ++b) {
      if (!found[a] || !found[b]) continue;
      size_t shared = 0;
      while (shared < chains[a].size() && shared < chains[b].size() &&
             chains[a][shared] == chains[b][shared])
        ++shared;
      if (shared == 0) continue;  // they meet at the root complex
      for (size_t g : {a, b})
        for (size_t k = shared; k < chains[g].size(); ++k)
          bridges[index[chains[g][k]]].peer_paths.insert({a, b});
    }
  }
  return bridges;
}

}  // namespace

Findings check_acs(const SystemPaths& paths, const std::vector<GpuId>& gpus) {
  if (gpus.empty()) return {Finding{"acs", "host", Verdict::kNotApplicable, "no GPU", ""}};
  Findings out;
  const std::vector<Bridge> bridges = bridges_above(paths, gpus, out);
  // lspci -vvv's view of the bridges, asked once and only if some config space is unreadable.
  std::map<std::string, std::optional<AcsControl>> lspci;
  bool lspci_asked = false, lspci_ran = false;
  std::vector<std::string> unreadable;
  std::string unreadable_why;
  for (const Bridge& b : bridges) {
    const std::optional<std::string> config = read_file(b.dir + "/config", 4096);
    AcsRead read;
    if (config) {
      read = read_acs_control(*config);
    } else {
      read.status = AcsRead::Status::kUnreadable;
      read.why = "cannot open " + b.dir + "/config";
    }
    bool from_config = true;
    if (read.status == AcsRead::Status::kUnreadable) {
      if (!lspci_asked && paths.lspci_vvv) {
        lspci_asked = true;
        if (std::optional<std::string> text = paths.lspci_vvv()) {
          lspci = parse_lspci_acs(*text);
          lspci_ran = true;
        }
      }
      const auto listed = lspci.find(b.address);
      if (listed == lspci.end()) {
        unreadable.push_back(b.address);
        if (unreadable_why.empty()) unreadable_why = read.why;
        continue;
      }
      read.status = listed->second ? AcsRead::Status::kFound : AcsRead::Status::kNoAcs;
      if (listed->second) read.control = *listed->second;
      from_config = false;
    }
    out.push_back(bridge_finding(gpus, b, read, from_config));
  }
  if (!unreadable.empty()) {
    std::string list;
    for (const std::string& a : unreadable) list += (list.empty() ? "" : ", ") + a;
    out.push_back(
        Finding{"acs", "bridges", Verdict::kNotApplicable,
                "cannot read ACS of " + std::to_string(unreadable.size()) + " bridge(s) (" + list +
                    "): " + unreadable_why +
                    (lspci_ran ? ", nor could lspci -vvv" : ", and lspci -vvv did not run") +
                    ": run as root (sudo lockstep-doctor) to read ACS",
                ""});
  }
  return out;
}

}  // namespace ls::doctor
