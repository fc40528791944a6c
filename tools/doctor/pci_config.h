// The ACS (PCIe Access Control Services) control register of a bridge, from its binary config
// space (sysfs `config`) or from `lspci -vvv` text. Pure parsers: no I/O, bounded on any input
// (a truncated file, a capability list that loops), so tests feed them fixture bytes and text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ls::doctor {

struct AcsControl {
  // Bits of the ACS Control register (PCIe base spec, ACS Extended Capability), named as lspci
  // prints them.
  static constexpr uint16_t kSrcValid = 1 << 0;
  static constexpr uint16_t kTransBlk = 1 << 1;
  static constexpr uint16_t kReqRedir = 1 << 2;
  static constexpr uint16_t kCmpltRedir = 1 << 3;
  static constexpr uint16_t kUpstreamFwd = 1 << 4;
  static constexpr uint16_t kEgressCtrl = 1 << 5;
  static constexpr uint16_t kDirectTrans = 1 << 6;

  uint16_t bits = 0;

  // Request or completion redirect: peer-to-peer traffic is sent up to the root complex.
  bool redirects_peer_traffic() const { return (bits & (kReqRedir | kCmpltRedir)) != 0; }
  bool egress_control() const { return (bits & kEgressCtrl) != 0; }
  // lspci's spelling: "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- ..."
  std::string describe() const;
};

struct AcsRead {
  enum class Status {
    kFound,       // control holds the register, cap_offset where the capability starts
    kNoAcs,       // the device has no ACS capability, so it cannot redirect
    kUnreadable,  // config space too short to hold extended capabilities (not root)
    kMalformed,   // the extended capability list is broken: why says how
  };
  Status status = Status::kNoAcs;
  AcsControl control;
  uint32_t cap_offset = 0;
  std::string why;  // kUnreadable, kMalformed: what was wrong
};

inline constexpr uint16_t kAcsCapabilityId = 0x000D;  // PCIe extended capability ID of ACS

// Walks the PCIe extended capability list from offset 0x100 (each header a 32-bit little-endian
// word: ID bits 0-15, version 16-19, next offset 20-31) to the ACS capability; its control
// register is the 16-bit word at +6. Non-root readers of sysfs get 64 bytes: kUnreadable.
AcsRead read_acs_control(std::string_view config_space);

// The ACSCtl line of each device in `lspci -vvv` text, keyed by its address as sysfs spells it
// ("0000:16:02.0"; a header line without a domain means domain 0000). A device whose
// capabilities lspci could read but that has no ACSCtl line maps to nullopt (no ACS); one whose
// capabilities were "<access denied>" (lspci not run as root) is absent: unknown.
std::map<std::string, std::optional<AcsControl>> parse_lspci_acs(std::string_view lspci_vvv);

}  // namespace ls::doctor
