// Readers over sysfs, the kernel command line and lspci (see pci_sysfs.h).
#include "tools/doctor/pci_sysfs.h"

#include <sys/wait.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace ls::doctor {

namespace fs = std::filesystem;

namespace {

bool is_hex(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<std::string> run_lspci_vvv() {
  // -D always prints the PCI domain, so addresses match sysfs's on multi-domain machines too.
  FILE* pipe = popen("lspci -D -vvv 2>/dev/null", "r");
  if (pipe == nullptr) return std::nullopt;
  std::string text;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0 && text.size() < (64u << 20))
    text.append(buffer, n);
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty())
    return std::nullopt;
  return text;
}

std::string sysfs_bus_id(std::string_view id) {
  // domain:bus:device.function; NVML pads the domain to 8 digits, lspci may leave it out.
  const size_t first = id.find(':');
  const size_t last = id.rfind(':');
  if (first == std::string_view::npos) return "";
  std::string domain = "0000";
  std::string_view rest = id;
  if (first != last) {
    std::string_view d = id.substr(0, first);
    if (!is_hex(d) || d.size() < 4 || d.size() > 8) return "";
    // An 8-digit domain is "0000xxxx" as sysfs has 4 digits (PCI domains fit in 16 bits here).
    if (d.size() > 4 && d.substr(0, d.size() - 4).find_first_not_of('0') != std::string::npos)
      return "";
    domain = lower(d.substr(d.size() - 4));
    rest = id.substr(first + 1);
  }
  const std::string out = domain + ":" + lower(rest);
  return is_pci_address(out) ? out : "";
}

bool is_pci_address(std::string_view n) {
  // DDDD:BB:DD.F
  if (n.size() != 12 || n[4] != ':' || n[7] != ':' || n[10] != '.') return false;
  if (!is_hex(n.substr(0, 4)) || !is_hex(n.substr(5, 2)) || !is_hex(n.substr(8, 2))) return false;
  if (n[11] < '0' || n[11] > '7') return false;
  for (char c : n)
    if (std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}

std::optional<std::string> read_file(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data(max_bytes, '\0');
  in.read(data.data(), static_cast<std::streamsize>(max_bytes));
  if (in.bad()) return std::nullopt;
  data.resize(static_cast<size_t>(in.gcount()));
  return data;
}

std::optional<std::string> read_attribute(const std::string& path) {
  std::optional<std::string> text = read_file(path, 4096);
  if (!text) return std::nullopt;
  const size_t end = text->find('\n');
  if (end != std::string::npos) text->resize(end);
  while (!text->empty() && std::isspace(static_cast<unsigned char>(text->back()))) text->pop_back();
  return text;
}

std::string pci_device_dir(const SystemPaths& paths, std::string_view pci_bus_id) {
  return paths.sys_root + "/bus/pci/devices/" + sysfs_bus_id(pci_bus_id);
}

std::optional<PciAncestry> pci_ancestry(const SystemPaths& paths, std::string_view pci_bus_id) {
  const std::string id = sysfs_bus_id(pci_bus_id);
  if (id.empty()) return std::nullopt;
  std::error_code ec;
  // sysfs nests devices below the bridges they sit behind:
  // devices/pci0000:14/0000:14:01.0/0000:15:00.0/0000:16:00.0/0000:17:00.0
  const fs::path real = fs::canonical(pci_device_dir(paths, id), ec);
  if (ec || real.filename() != id) return std::nullopt;
  PciAncestry out;
  out.device_dir = real.string();
  fs::path dir;
  for (const fs::path& part : real.parent_path()) {
    dir /= part;
    if (!is_pci_address(part.string())) continue;
    out.bridges.push_back(part.string());
    out.bridge_dirs.push_back(dir.string());
  }
  return out;
}

int pcie_generation(std::string_view speed) {
  // "32.0 GT/s PCIe"; the transfer rate per lane fixes the generation.
  const std::string s(speed);
  const char* begin = s.c_str();
  char* end = nullptr;
  const double gts = std::strtod(begin, &end);
  if (end == begin || std::string_view(end).substr(0, 5) != " GT/s") return -1;
  constexpr double kRates[] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0};
  for (int gen = 1; gen <= 6; ++gen)
    if (std::fabs(gts - kRates[gen - 1]) < 1e-6) return gen;
  return -1;
}

int pcie_width(std::string_view width) {
  if (width.empty() || width.size() > 2) return -1;
  int value = 0;
  for (char c : width) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value <= 32 ? value : -1;  // x0 means the link is down; x32 is the largest PCIe allows
}

}  // namespace ls::doctor
