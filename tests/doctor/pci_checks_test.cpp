// Tests for lockstep-doctor's PCIe link, ACS and IOMMU checks on the fake machines under
// tests/doctor/fixtures/pci/ (written by make_fixtures.py: see its machine list), for the
// config-space and lspci parsers on bytes and text made here, and for the checks on this
// machine's real /sys, where they only must not crash.
#include "tools/doctor/pci_checks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tools/doctor/pci_config.h"
#include "tools/doctor/pci_sysfs.h"

namespace ls::doctor {
namespace {

const std::string kPciFixtures = std::string(LOCKSTEP_DOCTOR_FIXTURES) + "/pci";

std::string fixture_text(const std::string& name) {
  std::ifstream in(kPciFixtures + "/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A fixture machine; lspci -vvv "prints" lspci_text (nullopt: lspci is missing).
SystemPaths machine(const std::string& name, std::optional<std::string> lspci_text = {}) {
  SystemPaths paths;
  paths.sys_root = kPciFixtures + "/" + name + "/sys";
  paths.proc_cmdline = kPciFixtures + "/" + name + "/cmdline";
  paths.lspci_vvv = [lspci_text] { return lspci_text; };
  return paths;
}

// The two GPUs behind the switch of most machines; cuda:1 spelled as NVML spells bus ids.
std::vector<GpuId> switch_gpus() { return {{0, "0000:17:00.0"}, {1, "00000000:18:00.0"}}; }

// broken: cuda:0-2 below three root ports, cuda:3 and cuda:4 not in sysfs at all.
std::vector<GpuId> broken_gpus() {
  return {{0, "0000:41:00.0"},
          {1, "0000:51:00.0"},
          {2, "0000:61:00.0"},
          {3, "0000:99:00.0"},
          {4, "garbage"}};
}

const Finding* find(const Findings& findings, const std::string& subject) {
  for (const Finding& f : findings)
    if (f.subject == subject) return &f;
  return nullptr;
}

// The finding about subject, which must exist and have the verdict.
Finding expect(const Findings& findings, const std::string& subject, Verdict verdict) {
  const Finding* f = find(findings, subject);
  if (f == nullptr) {
    ADD_FAILURE() << "no finding about " << subject << " in:\n" << findings_table(findings);
    return Finding{};
  }
  EXPECT_EQ(verdict_name(f->verdict), std::string(verdict_name(verdict)))
      << subject << ": " << f->detail;
  return *f;
}

::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
}

// ---- PCIe links

TEST(PciLinkTest, AtTheMaximumIsOk) {
  const Findings f = check_pcie_links(machine("switch_ok"), switch_gpus());
  ASSERT_EQ(f.size(), 2u);
  for (const char* gpu : {"cuda:0", "cuda:1"}) {
    const Finding link = expect(f, gpu, Verdict::kOk);
    EXPECT_EQ(link.check, "pcie-link");
    EXPECT_TRUE(has(link.detail, "x16 at 32.0 GT/s (Gen5), the maximum"));
  }
  EXPECT_TRUE(has(f[1].detail, "0000:18:00.0"));
}

TEST(PciLinkTest, NarrowLinkWarnsToReseat) {
  const Findings f = check_pcie_links(machine("degraded_links"), switch_gpus());
  const Finding narrow = expect(f, "cuda:0", Verdict::kWarn);
  EXPECT_TRUE(has(narrow.detail, "trained at x4 of x16 at 32.0 GT/s (Gen5)"));
  EXPECT_TRUE(has(narrow.detail, "bandwidth is 1/4"));
  EXPECT_TRUE(has(narrow.fix, "reseat the card"));
  EXPECT_TRUE(has(narrow.fix, "riser"));
  EXPECT_TRUE(has(narrow.fix, "lspci -vvv -s 0000:17:00.0"));
}

TEST(PciLinkTest, SlowLinkMayBeIdlePowerSaving) {
  const Findings f = check_pcie_links(machine("degraded_links"), switch_gpus());
  const Finding slow = expect(f, "cuda:1", Verdict::kWarn);
  EXPECT_TRUE(has(slow.detail, "x16 at 2.5 GT/s (Gen1) of 32.0 GT/s (Gen5)"));
  EXPECT_TRUE(has(slow.detail, "may be power saving at idle: recheck under load"));
  EXPECT_TRUE(has(slow.fix, "below Gen5 under load"));
}

TEST(PciLinkTest, GarbageOrMissingAttributesAreNotApplicable) {
  const Findings f = check_pcie_links(machine("broken"), broken_gpus());
  ASSERT_EQ(f.size(), 5u);
  EXPECT_TRUE(has(expect(f, "cuda:0", Verdict::kNotApplicable).detail,
                  "cannot parse current_link_speed 'fast'"));
  EXPECT_TRUE(has(expect(f, "cuda:1", Verdict::kNotApplicable).detail,
                  "cannot parse current_link_width 'wide'"));
  EXPECT_TRUE(has(expect(f, "cuda:2", Verdict::kNotApplicable).detail, "no current_link_width in"));
  EXPECT_TRUE(
      has(expect(f, "cuda:3", Verdict::kNotApplicable).detail, "0000:99:00.0: not in sysfs"));
  EXPECT_TRUE(
      has(expect(f, "cuda:4", Verdict::kNotApplicable).detail, "'garbage' is not a PCI address"));
}

TEST(PciLinkTest, ParsesSysfsSpeedsAndWidths) {
  EXPECT_EQ(pcie_generation("2.5 GT/s PCIe"), 1);
  EXPECT_EQ(pcie_generation("5.0 GT/s PCIe"), 2);
  EXPECT_EQ(pcie_generation("8 GT/s"), 3);  // kernels before 5.x
  EXPECT_EQ(pcie_generation("16.0 GT/s PCIe"), 4);
  EXPECT_EQ(pcie_generation("32.0 GT/s PCIe"), 5);
  EXPECT_EQ(pcie_generation("64.0 GT/s PCIe"), 6);
  for (const char* bad : {"", "Unknown", "Unknown speed", "fast", "32.0", "32.0 Gb/s", "7.0 GT/s",
                          "nan GT/s", "inf GT/s", "-8.0 GT/s", "1e400 GT/s"})
    EXPECT_EQ(pcie_generation(bad), -1) << bad;
  EXPECT_EQ(pcie_width("16"), 16);
  EXPECT_EQ(pcie_width("0"), 0);
  for (const char* bad : {"", "x16", "255", "99", "-4", "wide", "16 "})
    EXPECT_EQ(pcie_width(bad), -1) << bad;
}

// ---- sysfs helpers

TEST(PciSysfsTest, BusIdsInEverySpellingMapToSysfs) {
  EXPECT_EQ(sysfs_bus_id("0000:3B:00.0"), "0000:3b:00.0");      // CUDA
  EXPECT_EQ(sysfs_bus_id("00000000:3B:00.0"), "0000:3b:00.0");  // NVML
  EXPECT_EQ(sysfs_bus_id("3b:00.0"), "0000:3b:00.0");           // lspci without -D
  EXPECT_EQ(sysfs_bus_id("0001:c9:01.7"), "0001:c9:01.7");
  for (const char* bad : {"", "garbage", "0000:3b:00", "0000:3b:00.8", "12340000:3b:00.0",
                          "0000:3b:0g.0", "00:3b:00.0", "0000:3b:00.0 "})
    EXPECT_EQ(sysfs_bus_id(bad), "") << bad;
}

TEST(PciSysfsTest, AncestryListsTheBridgesRootPortFirst) {
  const std::optional<PciAncestry> a = pci_ancestry(machine("switch_ok"), "0000:18:00.0");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->bridges, (std::vector<std::string>{"0000:14:01.0", "0000:15:00.0", "0000:16:01.0"}));
  ASSERT_EQ(a->bridge_dirs.size(), 3u);
  EXPECT_TRUE(has(a->bridge_dirs[2], "/devices/pci0000:14/0000:14:01.0/0000:15:00.0/0000:16:01.0"));
  EXPECT_FALSE(pci_ancestry(machine("switch_ok"), "0000:99:00.0").has_value());
}

// ---- ACS from config space

// A 4 KiB config space whose extended capability list is the given (offset, header) pairs.
std::string config_with(const std::vector<std::pair<uint32_t, uint32_t>>& headers,
                        size_t size = 4096) {
  std::string bytes(4096, '\0');
  for (const auto& [at, header] : headers)
    for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(header >> (8 * i));
  bytes.resize(size);
  return bytes;
}

uint32_t header(uint32_t id, uint32_t next) { return id | 1u << 16 | next << 20; }

TEST(PciConfigTest, FindsAcsControlAfterOtherCapabilities) {
  std::string config = config_with({{0x100, header(0x0001, 0x150)}, {0x150, header(0x000D, 0)}});
  config[0x156] = 0x1d;  // SrcValid ReqRedir CmpltRedir UpstreamFwd
  const AcsRead read = read_acs_control(config);
  ASSERT_EQ(read.status, AcsRead::Status::kFound) << read.why;
  EXPECT_EQ(read.cap_offset, 0x150u);
  EXPECT_EQ(read.control.bits, 0x1d);
  EXPECT_TRUE(read.control.redirects_peer_traffic());
  EXPECT_EQ(read.control.describe(),
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-");
}

TEST(PciConfigTest, NoAcsWhenTheListEndsOrIsEmpty) {
  EXPECT_EQ(read_acs_control(config_with({{0x100, header(0x0001, 0)}})).status,
            AcsRead::Status::kNoAcs);
  EXPECT_EQ(read_acs_control(config_with({})).status, AcsRead::Status::kNoAcs);
  EXPECT_EQ(read_acs_control(config_with({{0x100, 0xffffffffu}})).status, AcsRead::Status::kNoAcs);
  EXPECT_EQ(read_acs_control(std::string(256, '\0')).status, AcsRead::Status::kNoAcs);  // PCI
}

TEST(PciConfigTest, ShortConfigSpaceIsUnreadable) {
  for (size_t size : {0, 64, 255}) {
    const AcsRead read = read_acs_control(std::string(size, '\0'));
    EXPECT_EQ(read.status, AcsRead::Status::kUnreadable) << size;
    EXPECT_TRUE(has(read.why, "only " + std::to_string(size) + " bytes"));
  }
}

TEST(PciConfigTest, BrokenListsAreMalformedNotEndless) {
  auto why = [](const std::string& config) {
    const AcsRead read = read_acs_control(config);
    EXPECT_EQ(read.status, AcsRead::Status::kMalformed);
    return read.why;
  };
  EXPECT_TRUE(has(why(config_with({{0x100, header(0x0001, 0x100)}})), "loops"));
  EXPECT_TRUE(has(why(config_with({{0x100, header(1, 0x200)}, {0x200, header(1, 0x100)}})),
                  "loops: 0x200 points back to 0x100"));
  EXPECT_TRUE(has(why(config_with({{0x100, header(0x0001, 0x40)}})), "points outside"));
  EXPECT_TRUE(has(why(config_with({{0x100, header(0x0001, 0x148)}}, 0x12c)), "truncated"));
  EXPECT_TRUE(has(why(config_with({{0x100, header(0x000D, 0)}}, 0x106)), "ACS capability"));
}

TEST(PciConfigTest, RandomConfigSpaceAlwaysEnds) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string config(rng() % 2 ? 4096 : rng() % 4200, '\0');
    for (char& c : config) c = static_cast<char>(rng());
    const AcsRead read = read_acs_control(config);  // must return, whatever it says
    EXPECT_TRUE(read.status != AcsRead::Status::kFound || read.cap_offset + 8 <= config.size());
  }
}

// ---- ACS from lspci -vvv

TEST(PciConfigTest, ParsesLspciAcsControlLines) {
  const auto acs = parse_lspci_acs(fixture_text("lspci_acs.txt"));
  ASSERT_TRUE(acs.count("0000:16:00.0") && acs.at("0000:16:00.0").has_value());
  EXPECT_EQ(acs.at("0000:16:00.0")->bits, 0x1d);  // not the ACSCap line above it
  ASSERT_TRUE(acs.count("0000:14:01.0") && acs.at("0000:14:01.0").has_value());
  EXPECT_EQ(acs.at("0000:14:01.0")->bits, 0);
  ASSERT_TRUE(acs.count("0000:15:00.0"));  // capabilities read, no ACS
  EXPECT_FALSE(acs.at("0000:15:00.0").has_value());
  EXPECT_FALSE(acs.count("0000:18:00.0"));  // "<access denied>": unknown
}

TEST(PciConfigTest, LspciTextWithDomainsOrGarbage) {
  const auto acs = parse_lspci_acs(
      "0001:c2:00.0 PCI bridge: PLX\n\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir+ "
      "UpstreamFwd- EgressCtrl+ DirectTrans-\n");
  ASSERT_TRUE(acs.count("0001:c2:00.0") && acs.at("0001:c2:00.0").has_value());
  EXPECT_EQ(acs.at("0001:c2:00.0")->bits, AcsControl::kCmpltRedir | AcsControl::kEgressCtrl);
  EXPECT_TRUE(parse_lspci_acs("").empty());
  EXPECT_TRUE(parse_lspci_acs("\t\tACSCtl:\tReqRedir+\n\n\n:::: \n").empty());  // no device yet
}

// ---- the ACS check

TEST(AcsTest, SwitchWithAcsOffIsOk) {
  const Findings f = check_acs(machine("switch_ok"), switch_gpus());
  ASSERT_EQ(f.size(), 4u) << findings_table(f);
  EXPECT_EQ(overall_verdict(f), Verdict::kOk);
  EXPECT_TRUE(has(expect(f, "0000:15:00.0", Verdict::kOk).detail, "no ACS capability"));
  const Finding down = expect(f, "0000:16:00.0", Verdict::kOk);
  EXPECT_EQ(down.check, "acs");
  EXPECT_TRUE(has(down.detail, "on the peer-to-peer path cuda:0<->cuda:1: no redirect"));
  EXPECT_TRUE(has(expect(f, "0000:14:01.0", Verdict::kOk).detail, "above cuda:0, cuda:1"));
}

TEST(AcsTest, RedirectOnTheSwitchDownstreamPortsFails) {
  std::vector<GpuId> gpus = switch_gpus();
  gpus.push_back({2, "0000:CA:00.0"});
  const Findings f = check_acs(machine("acs_on"), gpus);
  ASSERT_EQ(f.size(), 5u) << findings_table(f);
  for (const char* port : {"0000:16:00.0", "0000:16:01.0"}) {
    const Finding fail = expect(f, port, Verdict::kFail);
    EXPECT_TRUE(has(fail.detail, "ReqRedir+ CmpltRedir+ on the peer-to-peer path cuda:0<->cuda:1"));
    EXPECT_TRUE(has(fail.detail, "redirected to the root complex"));
    EXPECT_TRUE(has(fail.detail, "(from config space)"));
    EXPECT_TRUE(has(fail.fix, std::string("sudo setpci -s ") + port + " ECAP_ACS+0x6.w=0000"));
    EXPECT_TRUE(has(fail.fix, "0x14e.w=0000"));  // the ACS capability sits at 0x148
    EXPECT_TRUE(has(fail.fix, "BIOS"));
    EXPECT_TRUE(has(fail.fix, "NCCL_P2P_DISABLE=1"));
    EXPECT_TRUE(has(fail.fix, kNcclAcsGuide));
  }
  // See Note [Which bridges' ACS matters]: redirect on a bridge above both GPUs, or on a root
  // port whose GPU meets the others only at the root complex, changes no path.
  for (const char* port : {"0000:14:01.0", "0000:c9:01.0"})
    EXPECT_TRUE(has(expect(f, port, Verdict::kOk).detail,
                    "redirects, but no peer-to-peer path between the checked GPUs enters it"));
}

TEST(AcsTest, OneGpuHasNoPeerToRedirect) {
  const Findings f = check_acs(machine("acs_on"), {{0, "0000:17:00.0"}});
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(overall_verdict(f), Verdict::kOk) << findings_table(f);
}

TEST(AcsTest, NonRootWithoutLspciIsNotApplicable) {
  int lspci_runs = 0;
  SystemPaths paths = machine("nonroot");
  paths.lspci_vvv = [&lspci_runs]() -> std::optional<std::string> {
    ++lspci_runs;
    return std::nullopt;
  };
  const Findings f = check_acs(paths, switch_gpus());
  ASSERT_EQ(f.size(), 1u) << findings_table(f);
  const Finding na = expect(f, "bridges", Verdict::kNotApplicable);
  EXPECT_TRUE(has(na.detail,
                  "4 bridge(s) (0000:14:01.0, 0000:15:00.0, 0000:16:00.0, "
                  "0000:16:01.0): only 64 bytes of config space readable"));
  EXPECT_TRUE(has(na.detail, "run as root"));
  EXPECT_EQ(lspci_runs, 1);
}

TEST(AcsTest, NonRootFallsBackToLspci) {
  const Findings f = check_acs(machine("nonroot", fixture_text("lspci_acs.txt")), switch_gpus());
  ASSERT_EQ(f.size(), 4u) << findings_table(f);
  const Finding fail = expect(f, "0000:16:01.0", Verdict::kFail);
  EXPECT_TRUE(has(fail.detail, "(from lspci -vvv)"));
  EXPECT_TRUE(has(fail.fix, "sudo setpci -s 0000:16:01.0 ECAP_ACS+0x6.w=0000"));
  EXPECT_FALSE(has(fail.fix, "older setpci"));  // lspci does not say where the register is
  EXPECT_TRUE(has(expect(f, "0000:15:00.0", Verdict::kOk).detail, "no ACS capability"));
  expect(f, "0000:14:01.0", Verdict::kOk);
}

TEST(AcsTest, LspciRunsOnlyWhenConfigSpaceIsUnreadable) {
  int lspci_runs = 0;
  SystemPaths paths = machine("acs_on");
  paths.lspci_vvv = [&lspci_runs]() -> std::optional<std::string> {
    ++lspci_runs;
    return std::nullopt;
  };
  check_acs(paths, switch_gpus());
  EXPECT_EQ(lspci_runs, 0);
}

TEST(AcsTest, BrokenConfigSpaceIsNotApplicable) {
  const Findings f = check_acs(machine("broken"), broken_gpus());
  EXPECT_TRUE(has(expect(f, "0000:40:01.0", Verdict::kNotApplicable).detail,
                  "capability list loops: 0x148 points back to 0x100"));
  EXPECT_TRUE(has(expect(f, "0000:50:01.0", Verdict::kNotApplicable).detail,
                  "config space ends at 0x12c, before the capability at 0x148 (truncated)"));
  const Finding empty = expect(f, "bridges", Verdict::kNotApplicable);
  EXPECT_TRUE(has(empty.detail, "1 bridge(s) (0000:60:01.0): only 0 bytes"));
  EXPECT_TRUE(has(empty.detail, "lspci -vvv did not run"));
  EXPECT_TRUE(has(expect(f, "cuda:3", Verdict::kNotApplicable).detail, "cannot find"));
  EXPECT_TRUE(has(expect(f, "cuda:4", Verdict::kNotApplicable).detail, "cannot find 'garbage'"));
  EXPECT_EQ(f.size(), 5u) << findings_table(f);
}

// ---- the IOMMU check

TEST(IommuTest, OffIsOk) {
  const Findings f = check_iommu(machine("switch_ok"), switch_gpus());
  ASSERT_EQ(f.size(), 1u);
  const Finding host = expect(f, "host", Verdict::kOk);
  EXPECT_EQ(host.check, "iommu");
  EXPECT_TRUE(has(host.detail, "IOMMU off"));
  EXPECT_TRUE(has(host.detail, "kernel command line: no IOMMU flags"));
}

TEST(IommuTest, TranslatedDomainsWarnToBootWithPassthrough) {
  const Findings f = check_iommu(machine("iommu_dma"), switch_gpus());
  ASSERT_EQ(f.size(), 3u);
  const Finding host = expect(f, "host", Verdict::kOk);
  EXPECT_TRUE(has(host.detail, "IOMMU on (dmar0 dmar1); kernel command line: intel_iommu=on"));
  const Finding dma_fq = expect(f, "cuda:0", Verdict::kWarn);
  EXPECT_TRUE(has(dma_fq.detail, "0000:17:00.0: IOMMU group 32, DMA-FQ (translated)"));
  EXPECT_TRUE(has(dma_fq.fix, "iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: iommu=pt)"));
  EXPECT_TRUE(has(dma_fq.fix, "kernel/iommu_groups/32/type"));
  EXPECT_TRUE(has(dma_fq.fix, kNcclAcsGuide));
  EXPECT_TRUE(has(expect(f, "cuda:1", Verdict::kWarn).detail, "IOMMU group 33, DMA (translated)"));
}

TEST(IommuTest, PassthroughIsOk) {
  const Findings f = check_iommu(machine("iommu_pt"), switch_gpus());
  ASSERT_EQ(f.size(), 3u);
  EXPECT_TRUE(has(expect(f, "host", Verdict::kOk).detail, "intel_iommu=on iommu=pt"));
  EXPECT_TRUE(has(expect(f, "cuda:0", Verdict::kOk).detail, "identity (passthrough)"));
  // Group 33 has no type attribute (a kernel before 5.11): the command line decides.
  EXPECT_TRUE(
      has(expect(f, "cuda:1", Verdict::kOk).detail, "passthrough per the kernel command line"));
}

TEST(IommuTest, BrokenMachine) {
  const Findings f = check_iommu(machine("broken"), broken_gpus());
  ASSERT_EQ(f.size(), 6u) << findings_table(f);
  const Finding host = expect(f, "host", Verdict::kOk);
  EXPECT_TRUE(has(host.detail, "kernel command line: intel_iommu=on"));
  EXPECT_FALSE(has(host.detail, "iommu=pt"));  // after "--": init's argument, not the kernel's
  const Finding vfio = expect(f, "cuda:0", Verdict::kWarn);
  EXPECT_TRUE(has(vfio.detail, "'unmanaged': owned by a user-space driver (VFIO)"));
  EXPECT_TRUE(has(vfio.fix, "unbind it from vfio-pci"));
  const Finding unknown = expect(f, "cuda:1", Verdict::kWarn);
  EXPECT_TRUE(has(unknown.detail, "domain type unknown"));
  EXPECT_TRUE(has(unknown.fix, "iommu=pt"));
  for (const char* gpu : {"cuda:2", "cuda:3", "cuda:4"})
    EXPECT_TRUE(has(expect(f, gpu, Verdict::kNotApplicable).detail, "in no IOMMU group"));
}

TEST(IommuTest, UnreadableCommandLineIsSaid) {
  SystemPaths paths = machine("iommu_dma");
  paths.proc_cmdline = kPciFixtures + "/no-such-cmdline";
  EXPECT_TRUE(has(expect(check_iommu(paths, switch_gpus()), "host", Verdict::kOk).detail,
                  "kernel command line: not readable"));
}

// ---- no GPU, and the real machine

TEST(PciChecksTest, NoGpuIsNotApplicable) {
  const SystemPaths paths = machine("switch_ok");
  for (const Findings& f :
       {check_pcie_links(paths, {}), check_acs(paths, {}), check_iommu(paths, {})}) {
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].verdict, Verdict::kNotApplicable);
    EXPECT_EQ(f[0].detail, "no GPU");
  }
}

// Whatever this machine's /sys holds (no GPU, a VM, no IOMMU, not root), the real readers
// return findings and never throw; every PCI device stands in for a GPU.
TEST(PciChecksTest, RealSysfsDoesNotCrash) {
  const SystemPaths paths;  // /sys, /proc/cmdline, lspci
  std::vector<GpuId> devices;
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/sys/bus/pci/devices", ec), end;
       !ec && it != end && devices.size() < 8; it.increment(ec))
    devices.push_back({static_cast<int>(devices.size()), it->path().filename().string()});
  for (const std::vector<GpuId>& gpus : {devices, std::vector<GpuId>{}}) {
    Findings all;
    for (const Findings& f :
         {check_pcie_links(paths, gpus), check_acs(paths, gpus), check_iommu(paths, gpus)}) {
      EXPECT_FALSE(f.empty());
      all.insert(all.end(), f.begin(), f.end());
    }
    EXPECT_FALSE(findings_table(all).empty());
  }
}

}  // namespace
}  // namespace ls::doctor
