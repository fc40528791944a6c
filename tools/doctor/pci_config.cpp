// Config-space and lspci parsers for ACS (see pci_config.h).
#include "tools/doctor/pci_config.h"

#include <cctype>
#include <cstdio>
#include <set>

#include "tools/doctor/pci_sysfs.h"

namespace ls::doctor {

namespace {

constexpr uint32_t kExtendedStart = 0x100;  // extended capabilities start after the 256-byte PCI
constexpr uint32_t kConfigSize = 0x1000;    // space and end at 4 KiB

struct AcsBitName {
  uint16_t bit;
  const char* name;
};
constexpr AcsBitName kAcsBits[] = {
    {AcsControl::kSrcValid, "SrcValid"},       {AcsControl::kTransBlk, "TransBlk"},
    {AcsControl::kReqRedir, "ReqRedir"},       {AcsControl::kCmpltRedir, "CmpltRedir"},
    {AcsControl::kUpstreamFwd, "UpstreamFwd"}, {AcsControl::kEgressCtrl, "EgressCtrl"},
    {AcsControl::kDirectTrans, "DirectTrans"},
};

uint32_t le32(std::string_view bytes, uint32_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[at + i]);
  return v;
}

std::string hex(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%x", v);
  return text;
}

AcsRead malformed(std::string why) {
  AcsRead read;
  read.status = AcsRead::Status::kMalformed;
  read.why = std::move(why);
  return read;
}

// "SrcValid+ TransBlk- ReqRedir+ ..." -> the bits marked '+'.
AcsControl parse_acs_flags(std::string_view flags) {
  AcsControl control;
  for (const AcsBitName& b : kAcsBits) {
    const std::string plus = std::string(b.name) + "+";
    for (size_t at = flags.find(plus); at != std::string_view::npos;
         at = flags.find(plus, at + 1)) {
      const bool word_start = at == 0 || std::isspace(static_cast<unsigned char>(flags[at - 1]));
      if (word_start) control.bits |= b.bit;
    }
  }
  return control;
}

}  // namespace

std::string AcsControl::describe() const {
  std::string out;
  for (const AcsBitName& b : kAcsBits) {
    if (!out.empty()) out += ' ';
    out += b.name;
    out += (bits & b.bit) ? '+' : '-';
  }
  return out;
}

AcsRead read_acs_control(std::string_view config) {
  if (config.size() < kExtendedStart) {
    AcsRead read;
    read.status = AcsRead::Status::kUnreadable;
    read.why = "only " + std::to_string(config.size()) + " bytes of config space readable";
    return read;
  }
  if (config.size() < kExtendedStart + 4) return AcsRead{};  // conventional PCI: 256 bytes
  std::set<uint32_t> seen;  // a list that comes back to an offset loops forever
  uint32_t at = kExtendedStart;
  while (true) {
    if (at + 4 > config.size()) {
      return malformed("config space ends at " + hex(static_cast<uint32_t>(config.size())) +
                       ", before the capability at " + hex(at) + " (truncated)");
    }
    const uint32_t header = le32(config, at);
    // An empty list reads as 0 (or all ones from a device that has gone away).
    if (at == kExtendedStart && (header == 0 || header == 0xffffffffu)) return AcsRead{};
    if ((header & 0xffff) == kAcsCapabilityId) {
      if (at + 8 > config.size())
        return malformed("config space ends inside the ACS capability at " + hex(at));
      AcsRead read;
      read.status = AcsRead::Status::kFound;
      read.cap_offset = at;
      read.control.bits = static_cast<uint16_t>(static_cast<uint8_t>(config[at + 6]) |
                                                static_cast<uint8_t>(config[at + 7]) << 8);
      return read;
    }
    seen.insert(at);
    const uint32_t next = (header >> 20) & 0xffc;  // the low two bits are reserved
    if (next == 0) return AcsRead{};
    if (next < kExtendedStart || next >= kConfigSize)
      return malformed("capability at " + hex(at) + " points outside extended config space, to " +
                       hex(next));
    if (seen.count(next))
      return malformed("capability list loops: " + hex(at) + " points back to " + hex(next));
    at = next;
  }
}

std::map<std::string, std::optional<AcsControl>> parse_lspci_acs(std::string_view text) {
  std::map<std::string, std::optional<AcsControl>> out;
  std::string device;  // the address of the device whose block we are in
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) continue;
    if (!std::isspace(static_cast<unsigned char>(line[0]))) {
      // A header: "16:02.0 PCI bridge: ..." or, with -D, "0000:16:02.0 PCI bridge: ...".
      device = sysfs_bus_id(line.substr(0, line.find(' ')));
      if (!device.empty()) out[device] = std::nullopt;
      continue;
    }
    if (device.empty()) continue;
    const size_t start = line.find_first_not_of(" \t");
    const std::string_view body = line.substr(start == std::string_view::npos ? 0 : start);
    if (body.rfind("Capabilities: <access denied>", 0) == 0) {
      out.erase(device);  // lspci was not root: say nothing about this device
      device.clear();
    } else if (body.rfind("ACSCtl:", 0) == 0) {
      out[device] = parse_acs_flags(body.substr(7));
    }
  }
  return out;
}

}  // namespace ls::doctor
