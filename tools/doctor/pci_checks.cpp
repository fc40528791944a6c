// The PCIe link and IOMMU checks (see pci_checks.h); the ACS check is in acs_check.cpp.
#include "tools/doctor/pci_checks.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "tools/doctor/pci_sysfs.h"

namespace ls::doctor {

namespace fs = std::filesystem;

namespace {

Finding not_applicable(const char* check, std::string subject, std::string detail) {
  return Finding{check, std::move(subject), Verdict::kNotApplicable, std::move(detail), ""};
}

// "32.0 GT/s PCIe" -> "32.0 GT/s (Gen5)".
std::string speed_label(std::string raw, int gen) {
  const size_t suffix = raw.find(" PCIe");
  if (suffix != std::string::npos) raw.resize(suffix);
  return raw + " (Gen" + std::to_string(gen) + ")";
}

Finding link_finding(const SystemPaths& paths, const GpuId& gpu) {
  const std::string id = sysfs_bus_id(gpu.pci_bus_id);
  if (id.empty())
    return not_applicable("pcie-link", gpu.name(),
                          "PCI bus id '" + gpu.pci_bus_id + "' is not a PCI address");
  const std::string dir = pci_device_dir(paths, id);
  std::error_code ec;
  if (!fs::exists(dir, ec))
    return not_applicable("pcie-link", gpu.name(), id + ": not in sysfs (no " + dir + ")");
  const char* kNames[] = {"current_link_width", "max_link_width", "current_link_speed",
                          "max_link_speed"};
  std::string values[4];
  for (int i = 0; i < 4; ++i) {
    std::optional<std::string> value = read_attribute(dir + "/" + kNames[i]);
    if (!value)
      return not_applicable(
          "pcie-link", gpu.name(),
          id + ": no " + kNames[i] + " in " + dir + " (not a PCIe device here, or not in sysfs)");
    values[i] = *value;
  }
  const int width = pcie_width(values[0]), max_width = pcie_width(values[1]);
  const int gen = pcie_generation(values[2]), max_gen = pcie_generation(values[3]);
  std::string unparsed;
  const int parsed[4] = {width, max_width, gen, max_gen};
  for (int i = 0; i < 4; ++i)
    if (parsed[i] < 0)
      unparsed += std::string(unparsed.empty() ? "" : ", ") + kNames[i] + " '" + values[i] + "'";
  const bool speeds_known = gen > 0 && max_gen > 0;
  const std::string speeds = !speeds_known    ? std::string()
                             : gen == max_gen ? " at " + speed_label(values[2], gen)
                                              : " at " + speed_label(values[2], gen) + " of " +
                                                    speed_label(values[3], max_gen);
  Finding f{"pcie-link", gpu.name(), Verdict::kOk, id + ": ", ""};
  // A narrower link is hardware (seating, slot wiring, riser): judge it even if a speed is odd.
  if (width >= 0 && max_width > 0 && width < max_width) {
    f.verdict = Verdict::kWarn;
    if (width == 0) {
      f.detail += "the link is down (x0 of x" + values[1] + ")";
    } else {
      const int g = std::gcd(width, max_width);
      f.detail += "trained at x" + values[0] + " of x" + values[1] + speeds + ": bandwidth is " +
                  std::to_string(width / g) + "/" + std::to_string(max_width / g) +
                  " of what the card can do";
    }
    f.fix =
        "reseat the card and check the slot and riser: a slot wired for fewer lanes, lanes shared "
        "with another slot or an M.2 drive, a riser or cable that loses lanes all train narrow "
        "(compare LnkCap and LnkSta in `sudo lspci -vvv -s " +
        id + "`)";
    return f;
  }
  if (!unparsed.empty())
    return not_applicable("pcie-link", gpu.name(),
                          id + ": cannot parse " + unparsed +
                              " (expected a width like '16' and a speed like '32.0 GT/s PCIe')");
  if (width == 0) {  // x0 of x0: no link at all
    f.verdict = Verdict::kWarn;
    f.detail += "the link is down (x0)";
    f.fix = "reseat the card; check that it is powered and seen by `lspci`";
    return f;
  }
  if (gen < max_gen) {
    f.verdict = Verdict::kWarn;
    f.detail += "x" + values[0] + speeds + ": may be power saving at idle: recheck under load";
    f.fix = "GPUs lower the link speed when idle; read " + dir +
            "/current_link_speed again while it trains (or `nvidia-smi -q -d PCIE`). If it stays "
            "below Gen" +
            std::to_string(max_gen) +
            " under load, check the BIOS PCIe speed setting, the slot and the riser";
    return f;
  }
  f.detail += "x" + values[0] + speeds + ", the maximum";
  return f;
}

// The IOMMU-related words of the kernel command line (arguments after "--" go to init).
std::vector<std::string> iommu_flags(const std::string& cmdline) {
  std::vector<std::string> flags;
  std::istringstream words(cmdline);
  std::string word;
  while (words >> word && word != "--") {
    const std::string key = word.substr(0, word.find('='));
    if (key == "intel_iommu" || key == "amd_iommu" || key == "iommu" || key.rfind("iommu.", 0) == 0)
      flags.push_back(word);
  }
  return flags;
}

bool asks_passthrough(const std::vector<std::string>& flags) {
  for (const std::string& f : flags)
    if (f == "iommu=pt" || f == "iommu.passthrough=1" || f == "iommu.passthrough=on" ||
        f == "iommu.passthrough=y")
      return true;
  return false;
}

std::string joined(const std::vector<std::string>& words, const char* none) {
  if (words.empty()) return none;
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string iommu_fix(const std::string& group_dir) {
  return "boot with iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: iommu=pt) so the GPUs' DMA "
         "and peer-to-peer traffic bypass translation: add it to GRUB_CMDLINE_LINUX in "
         "/etc/default/grub, regenerate the grub config (update-grub, grub2-mkconfig), reboot "
         "(kernel 5.11+: or, with the group's devices "
         "unbound, echo identity > " +
         group_dir +
         "/type). See the NCCL troubleshooting guide (IO virtualization under PCI Access "
         "Control Services): " +
         kNcclAcsGuide;
}

Finding gpu_iommu_finding(const SystemPaths& paths, const GpuId& gpu,
                          const std::vector<std::string>& flags) {
  const std::string id = sysfs_bus_id(gpu.pci_bus_id);
  std::error_code ec;
  const fs::path group = fs::canonical(pci_device_dir(paths, id) + "/iommu_group", ec);
  if (id.empty() || ec)
    return not_applicable(
        "iommu", gpu.name(),
        (id.empty() ? gpu.pci_bus_id : id) + ": in no IOMMU group (no iommu_group link in sysfs)");
  const std::string where = id + ": IOMMU group " + group.filename().string() + ", ";
  const std::optional<std::string> type = read_attribute(group.string() + "/type");
  Finding f{"iommu", gpu.name(), Verdict::kOk, where, ""};
  if (!type) {
    if (asks_passthrough(flags)) {
      f.detail += "passthrough per the kernel command line (" + joined(flags, "") + ")";
    } else {
      f.verdict = Verdict::kWarn;
      f.detail += "domain type unknown (no " + group.string() +
                  "/type: kernel older than 5.11?) and no iommu=pt on the kernel command line: "
                  "DMA is probably translated";
      f.fix = iommu_fix(group.string());
    }
    return f;
  }
  if (*type == "identity") {
    f.detail += "identity (passthrough): peer-to-peer traffic is not translated";
  } else if (*type == "DMA" || *type == "DMA-FQ") {
    f.verdict = Verdict::kWarn;
    f.detail += *type +
                " (translated): every DMA and peer-to-peer access of this GPU goes through IOMMU "
                "translation: slower multi-GPU transfers, and hangs if bridges also redirect (ACS)";
    f.fix = iommu_fix(group.string());
  } else {
    f.verdict = Verdict::kWarn;
    f.detail += "domain type '" + *type + "'" +
                (*type == "unmanaged" ? ": owned by a user-space driver (VFIO), not the host's"
                                      : ": not identity (passthrough)");
    f.fix = *type == "unmanaged"
                ? "if this GPU is to train here, unbind it from vfio-pci and bind it to the nvidia "
                  "driver (driverctl, or /sys/bus/pci/drivers/*/unbind and bind)"
                : iommu_fix(group.string());
  }
  return f;
}

}  // namespace

Findings check_pcie_links(const SystemPaths& paths, const std::vector<GpuId>& gpus) {
  if (gpus.empty()) return {not_applicable("pcie-link", "host", "no GPU")};
  Findings out;
  for (const GpuId& gpu : gpus) out.push_back(link_finding(paths, gpu));
  return out;
}

Findings check_iommu(const SystemPaths& paths, const std::vector<GpuId>& gpus) {
  if (gpus.empty()) return {not_applicable("iommu", "host", "no GPU")};
  std::vector<std::string> units;  // dmar0, ivhd0, ...: one per IOMMU the kernel drives
  std::error_code ec;
  for (fs::directory_iterator it(paths.sys_root + "/class/iommu", ec), end; !ec && it != end;
       it.increment(ec))
    units.push_back(it->path().filename().string());
  std::sort(units.begin(), units.end());
  const std::optional<std::string> cmdline = read_attribute(paths.proc_cmdline);
  const std::vector<std::string> flags =
      cmdline ? iommu_flags(*cmdline) : std::vector<std::string>{};
  const std::string cmdline_text =
      "kernel command line: " +
      (cmdline ? joined(flags, "no IOMMU flags") : "not readable (" + paths.proc_cmdline + ")");
  Findings out;
  if (units.empty()) {
    out.push_back(
        Finding{"iommu", "host", Verdict::kOk,
                "IOMMU off (no IOMMU in " + paths.sys_root + "/class/iommu); " + cmdline_text, ""});
    return out;
  }
  out.push_back(Finding{"iommu", "host", Verdict::kOk,
                        "IOMMU on (" + joined(units, "") + "); " + cmdline_text, ""});
  for (const GpuId& gpu : gpus) out.push_back(gpu_iommu_finding(paths, gpu, flags));
  return out;
}

}  // namespace ls::doctor
