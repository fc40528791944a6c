// Where lockstep-doctor reads the machine's PCI topology from, and the small readers over it:
// a sysfs tree whose root is a parameter (tests point it at fixture trees under
// tests/doctor/fixtures/pci/), the kernel command line, and `lspci -vvv` text. Nothing here
// writes; every reader returns "absent" (std::nullopt, empty) instead of throwing, because a
// doctor must diagnose a half-broken machine, not stop on it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ls::doctor {

// The text of `lspci -D -vvv`, or nullopt when lspci is missing or fails.
std::optional<std::string> run_lspci_vvv();

struct SystemPaths {
  std::string sys_root = "/sys";               // sysfs: bus/pci/devices, class/iommu, kernel/...
  std::string proc_cmdline = "/proc/cmdline";  // the kernel command line
  // Second source of ACS state, asked (at most once per check) only for bridges whose config
  // space is not readable. Tests give fixture text; the default runs lspci.
  std::function<std::optional<std::string>()> lspci_vvv = run_lspci_vvv;
};

// "0000:3B:00.0" (CUDA), "00000000:3B:00.0" (NVML) or "3b:00.0" -> "0000:3b:00.0", sysfs's
// spelling. Returns "" for anything else.
std::string sysfs_bus_id(std::string_view pci_bus_id);

// True for a sysfs PCI device name: DDDD:BB:DD.F in lowercase hex.
bool is_pci_address(std::string_view name);

// The whole file (at most max_bytes), or nullopt when it cannot be opened.
std::optional<std::string> read_file(const std::string& path, size_t max_bytes = 1 << 20);
// The file's first line without trailing whitespace (sysfs attributes), or nullopt.
std::optional<std::string> read_attribute(const std::string& path);

// <sys_root>/bus/pci/devices/<bus id>, the device's directory (a link into <sys_root>/devices).
std::string pci_device_dir(const SystemPaths& paths, std::string_view pci_bus_id);

// The device's real directory and the PCI bridges and ports above it, root port first, as
// sysfs nests them: each ancestor directory named like a PCI address is a bridge.
struct PciAncestry {
  std::string device_dir;                // the resolved (canonical) directory of the device
  std::vector<std::string> bridges;      // bridge addresses, root port first, the device excluded
  std::vector<std::string> bridge_dirs;  // their directories, same order
};
// nullopt when the device is not under <sys_root>/bus/pci/devices.
std::optional<PciAncestry> pci_ancestry(const SystemPaths& paths, std::string_view pci_bus_id);

// PCIe link attributes as sysfs spells them: "32.0 GT/s PCIe" (older kernels: "8 GT/s") ->
// generation 1-6; a width "16" -> 16. Return -1 for anything else ("Unknown", garbage).
int pcie_generation(std::string_view link_speed);
int pcie_width(std::string_view link_width);

}  // namespace ls::doctor
