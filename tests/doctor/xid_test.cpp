// Xid errors read out of a fixture kernel log (dmesg and journalctl lines, the driver's old, new
// and MIG forms, malformed lines), the table of codes, and the xid check on fixture GPUs.
#include "tools/doctor/xid.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tools/doctor/gpu_health.h"

namespace ls::doctor {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(LOCKSTEP_DOCTOR_FIXTURES) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Xid, ParsesTheDriversLineWithPidAndName) {
  const auto e = parse_xid_line(
      "[ 9001.002003] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off "
      "the bus.");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(e->code, 79);
  EXPECT_EQ(e->pid, 1234);
  EXPECT_EQ(e->process, "python");
  EXPECT_EQ(e->message, "GPU has fallen off the bus.");
}

TEST(Xid, IgnoresLinesThatAreNotXidReports) {
  EXPECT_FALSE(parse_xid_line("").has_value());
  EXPECT_FALSE(parse_xid_line("NVRM: GPU at PCI:0000:3b:00: GPU-0b11d014").has_value());
  EXPECT_FALSE(parse_xid_line("usb 1-1: new device, mentions Xid in passing").has_value());
}

TEST(Xid, ReadsEveryFormInTheFixtureLogAndSkipsMalformedLines) {
  const std::vector<XidEvent> events = parse_xids(fixture("kernel_log_xid.txt"));
  ASSERT_EQ(events.size(), 9u);
  // Two Xid 13 then a 79 with no process to blame.
  EXPECT_EQ(events[0].code, 13);
  EXPECT_EQ(events[0].pid, 51234);
  EXPECT_EQ(events[0].message,
            "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address");
  EXPECT_EQ(events[1].code, 13);
  EXPECT_EQ(events[2].code, 79);
  EXPECT_EQ(events[2].pid, -1);
  EXPECT_EQ(events[2].process, "");
  EXPECT_EQ(events[2].message, "GPU has fallen off the bus.");
  // The pre-"PCI:" form of older drivers, without pid.
  EXPECT_EQ(events[3].pci_bus_id, "0000:5e:00.0");
  EXPECT_EQ(events[3].code, 31);
  EXPECT_EQ(events[3].pid, -1);
  EXPECT_TRUE(contains(events[3].message, "MMU Fault")) << events[3].message;
  EXPECT_EQ(events[4].code, 8);
  // journalctl's prefix and a MIG attribution inside the parentheses.
  EXPECT_EQ(events[5].pci_bus_id, "0000:af:00.0");
  EXPECT_EQ(events[5].code, 94);
  EXPECT_EQ(events[5].pid, 7788);
  EXPECT_EQ(events[5].process, "trainer");
  EXPECT_EQ(events[5].message, "Contained: SM (0x1). RST: No, D-RST: No");
  // pid but no name (older drivers).
  EXPECT_EQ(events[6].code, 63);
  EXPECT_EQ(events[6].pid, 1896);
  EXPECT_EQ(events[6].process, "");
  EXPECT_EQ(events[6].message,
            "Row Remapper: New row marked for remapping, reset gpu to activate.");
  EXPECT_EQ(events[7].pci_bus_id, "0000:d8:00.0");
  EXPECT_EQ(events[7].code, 48);
  EXPECT_EQ(events[8].code, 154);
}

TEST(Xid, TheTableKnowsTheCommonCodesAndTheirSeverity) {
  for (int code : {13, 31, 43, 45, 63, 92, 94, 109, 154}) {
    ASSERT_NE(xid_info(code), nullptr) << code;
    EXPECT_EQ(xid_info(code)->verdict, Verdict::kWarn) << code;
  }
  for (int code : {32, 48, 61, 62, 64, 74, 79, 95, 119, 120}) {
    ASSERT_NE(xid_info(code), nullptr) << code;
    EXPECT_EQ(xid_info(code)->verdict, Verdict::kFail) << code;
    EXPECT_GT(std::string(xid_info(code)->advice).size(), 20u) << code;
  }
  EXPECT_STREQ(xid_info(79)->meaning, "GPU has fallen off the bus");
  EXPECT_TRUE(contains(xid_info(79)->advice, "power")) << xid_info(79)->advice;
  EXPECT_EQ(xid_info(8), nullptr);
  EXPECT_EQ(xid_info(0), nullptr);
}

TEST(Xid, CheckGivesEachGpuTheVerdictOfItsWorstXid) {
  const std::vector<GpuId> gpus = {
      {0, "0000:3B:00.0"}, {1, "0000:5E:00.0"}, {2, "0000:AF:00.0"}, {3, "0000:18:00.0"}};
  const Findings findings = check_xid(KernelLog{fixture("kernel_log_xid.txt"), ""}, gpus);
  ASSERT_EQ(findings.size(), 4u);  // 0000:d8:00 is not one of ours: no finding
  EXPECT_EQ(findings[0].check, "xid");
  EXPECT_EQ(findings[0].subject, "cuda:0");
  EXPECT_EQ(findings[0].verdict, Verdict::kFail);
  EXPECT_EQ(findings[0].detail,
            "Xid 79 x1 (GPU has fallen off the bus); Xid 13 x2 (Graphics Engine Exception)");
  EXPECT_TRUE(contains(findings[0].fix, "Xid 79: the GPU stopped answering on PCIe"))
      << findings[0].fix;
  EXPECT_TRUE(contains(findings[0].fix, "https://docs.nvidia.com/deploy/xid-errors/"))
      << findings[0].fix;
  EXPECT_EQ(findings[1].verdict, Verdict::kWarn);
  EXPECT_EQ(findings[1].detail,
            "Xid 31 x1 (GPU memory page fault); Xid 8 x1 (not in lockstep's table: 'Channel "
            "00000010 idle timeout')");
  EXPECT_EQ(findings[2].verdict, Verdict::kWarn);
  EXPECT_TRUE(contains(findings[2].detail, "Xid 94 x1 (Contained ECC error)"))
      << findings[2].detail;
  EXPECT_TRUE(contains(findings[2].detail,
                       "(GPU recovery action changed: 'GPU recovery action "
                       "changed from 0x0 (None) to 0x1 (GPU Reset Required)')"))
      << findings[2].detail;
  EXPECT_EQ(findings[3].verdict, Verdict::kOk);
  EXPECT_EQ(findings[3].detail, "no Xid in the kernel log");
}

TEST(Xid, AnUnreadableLogIsNotApplicableSayingWhy) {
  const KernelLog log{"", "kernel log not readable (dmesg: Operation not permitted)"};
  const Findings findings = check_xid(log, {{0, "0000:3B:00.0"}});
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].verdict, Verdict::kNotApplicable);
  EXPECT_EQ(findings[0].subject, "host");
  EXPECT_EQ(findings[0].detail, log.unreadable_reason);
}

TEST(Xid, ReadingTheRealLogGivesTextOrAReason) {
  const KernelLog log = read_kernel_log();  // root in a container: text; a user: maybe denied
  EXPECT_NE(log.text.empty(), log.unreadable_reason.empty()) << log.unreadable_reason;
  if (!log.unreadable_reason.empty()) {
    EXPECT_TRUE(contains(log.unreadable_reason, "kernel log not readable"));
  }
}

}  // namespace
}  // namespace ls::doctor
