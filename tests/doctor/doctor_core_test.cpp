// lockstep-doctor's own machinery and the checks written against fixture answers: the findings
// table and JSON, the host checks on fixture /proc/meminfo files, the peer-to-peer verdicts on
// measured (fixture) copy rates and child results, and the child-process runner with its time
// limit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "engine/core/json_reader.h"
#include "tools/doctor/allreduce_check.h"
#include "tools/doctor/finding.h"
#include "tools/doctor/host_checks.h"
#include "tools/doctor/p2p_checks.h"

namespace ls::doctor {
namespace {

const std::string kFixtures = LOCKSTEP_DOCTOR_FIXTURES;

TEST(DoctorFindings, TableJsonAndOverallVerdict) {
  const Findings findings = {
      {"pcie-link", "cuda:0", Verdict::kOk, "x16 at 32 GT/s", ""},
      {"acs", "0000:16:02.0", Verdict::kFail, "ReqRedir+ CmpltRedir+", "setpci ..."},
      {"p2p", "host", Verdict::kNotApplicable, "no GPU", "ignored"},
  };
  const std::string table = findings_table(findings);
  EXPECT_NE(table.find("OK    pcie-link  cuda:0        x16 at 32 GT/s\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("FAIL  acs        0000:16:02.0  ReqRedir+ CmpltRedir+\n      fix: setpci"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("ignored"), std::string::npos);  // no fix line for N/A
  EXPECT_EQ(overall_verdict(findings), Verdict::kFail);
  EXPECT_EQ(overall_verdict({findings[0], findings[2]}), Verdict::kOk);
  EXPECT_EQ(overall_verdict({{"x", "y", Verdict::kWarn, "", ""}, findings[0]}), Verdict::kWarn);

  const JsonValue json = parse_json(findings_json(findings), "findings");
  EXPECT_EQ(json.find("verdict")->as_string(), "FAIL");
  ASSERT_EQ(json.find("findings")->items().size(), 3u);
  const JsonValue& acs = json.find("findings")->items()[1];
  EXPECT_EQ(acs.find("check")->as_string(), "acs");
  EXPECT_EQ(acs.find("verdict")->as_string(), "FAIL");
  EXPECT_EQ(acs.find("fix")->as_string(), "setpci ...");
  EXPECT_EQ(json.find("findings")->items()[2].find("verdict")->as_string(), "N/A");
}

TEST(DoctorHost, MemoryFromMeminfo) {
  const Finding ok = check_host_memory(kFixtures + "/meminfo_ok.txt");
  EXPECT_EQ(ok.verdict, Verdict::kOk);
  EXPECT_EQ(ok.detail, "28.6 GiB of 31.2 GiB available");
  const Finding low = check_host_memory(kFixtures + "/meminfo_low.txt");
  EXPECT_EQ(low.verdict, Verdict::kWarn);
  EXPECT_EQ(low.detail, "2.0 GiB of 31.2 GiB available");
  EXPECT_NE(low.fix.find("other processes"), std::string::npos);
  const Finding missing = check_host_memory(kFixtures + "/no-such-file");
  EXPECT_EQ(missing.verdict, Verdict::kNotApplicable);
  EXPECT_NE(missing.detail.find("no-such-file"), std::string::npos);
}

TEST(DoctorHost, CoresAgainstDeviceThreads) {
  const std::vector<Device> four_hosts = {{DeviceKind::kHost, 0},
                                          {DeviceKind::kHost, 1},
                                          {DeviceKind::kHost, 2},
                                          {DeviceKind::kHost, 3}};
  EXPECT_EQ(check_cores(four_hosts, 4, 1).verdict, Verdict::kOk);
  const Finding over = check_cores(four_hosts, 2, 1);
  EXPECT_EQ(over.verdict, Verdict::kWarn);
  EXPECT_NE(over.fix.find("--devices host:2"), std::string::npos) << over.fix;
  EXPECT_EQ(check_cores(four_hosts, 4, 2).verdict, Verdict::kWarn);  // 8 threads on 4 cores
  const std::vector<Device> gpus = {{DeviceKind::kCuda, 0}, {DeviceKind::kCuda, 1}};
  EXPECT_EQ(check_cores(gpus, 2, 1).verdict, Verdict::kOk);
  EXPECT_EQ(check_cores(gpus, 1, 1).verdict, Verdict::kWarn);
}

TEST(DoctorHost, NumaNodesFromSysfs) {
  const std::string root = ::testing::TempDir() + "/lockstep-numa-" + std::to_string(::getpid());
  std::filesystem::create_directories(root + "/devices/system/node");
  auto count = [&](const std::string& online) {
    std::ofstream(root + "/devices/system/node/online") << online << "\n";
    return numa_node_count(root);
  };
  EXPECT_EQ(count("0"), 1);
  EXPECT_EQ(count("0-1"), 2);
  EXPECT_EQ(count("0-1,3,5-7"), 6);
  EXPECT_EQ(count("garbage"), 0);
  EXPECT_EQ(count("3-1"), 0);
  EXPECT_EQ(numa_node_count(root + "/missing"), 0);
  EXPECT_NE(check_cores({{DeviceKind::kHost, 0}}, 2, 1, 2).detail.find(", 2 NUMA node(s)"),
            std::string::npos);
  std::filesystem::remove_all(root);
}

TEST(DoctorP2p, PcieLinkBandwidth) {
  EXPECT_NEAR(pcie_link_gbps(5, 16), 63.0, 0.1);
  EXPECT_NEAR(pcie_link_gbps(4, 16), 31.5, 0.1);
  EXPECT_NEAR(pcie_link_gbps(3, 4), 3.94, 0.01);
  EXPECT_EQ(pcie_link_gbps(0, 16), 0);
  EXPECT_EQ(pcie_link_gbps(7, 16), 0);
  EXPECT_EQ(pcie_link_gbps(5, 0), 0);
}

TEST(DoctorP2p, LinkBoundFromSysfs) {
  SystemPaths paths;
  paths.sys_root = kFixtures + "/pci/degraded_links/sys";
  // cuda:0 trained at x4 of x16; cuda:1 idles at Gen1 but can run at Gen5 under load.
  EXPECT_EQ(link_bound_of(paths, {0, "0000:17:00.0"}).text, "PCIe Gen5 x4");
  EXPECT_EQ(link_bound_of(paths, {1, "0000:18:00.0"}).text, "PCIe Gen5 x16");
  paths.sys_root = kFixtures + "/pci/switch_ok/sys";
  const LinkBound full = link_bound_of(paths, {0, "0000:17:00.0"});
  EXPECT_EQ(full.text, "PCIe Gen5 x16");
  EXPECT_NEAR(full.gbps, 63.0, 0.1);
  EXPECT_EQ(link_bound_of(paths, {5, "0000:99:00.0"}).gbps, 0);  // not in sysfs: unknown
}

TEST(DoctorP2p, CopyVerdicts) {
  const GpuId a{0, "0000:17:00.0"}, b{1, "0000:18:00.0"};
  const LinkBound gen5{pcie_link_gbps(5, 16), "PCIe Gen5 x16"};
  const LinkBound gen5_x4{pcie_link_gbps(5, 4), "PCIe Gen5 x4"};
  const Finding healthy = judge_peer_copy(a, b, true, 48.0, "", gen5, gen5);
  EXPECT_EQ(healthy.verdict, Verdict::kOk);
  EXPECT_EQ(healthy.subject, "cuda:0->cuda:1");
  EXPECT_NE(healthy.detail.find("48.0 GB/s"), std::string::npos) << healthy.detail;
  const Finding nvlink = judge_peer_copy(a, b, true, 350.0, "", gen5, gen5);
  EXPECT_EQ(nvlink.verdict, Verdict::kOk);
  EXPECT_NE(nvlink.detail.find("NVLink"), std::string::npos);
  const Finding slow = judge_peer_copy(a, b, false, 9.0, "", gen5, gen5);
  EXPECT_EQ(slow.verdict, Verdict::kWarn);
  EXPECT_NE(slow.detail.find("under 30% of the link (PCIe Gen5 x16"), std::string::npos)
      << slow.detail;
  EXPECT_NE(slow.fix.find("ACS"), std::string::npos);
  // The bound is the slower link of the two: 9 GB/s over a x4 link is fine.
  EXPECT_EQ(judge_peer_copy(a, b, true, 9.0, "", gen5, gen5_x4).verdict, Verdict::kOk);
  const Finding hung = judge_peer_copy(a, b, true, -1, "hung (no result in 20000 ms)", gen5, gen5);
  EXPECT_EQ(hung.verdict, Verdict::kFail);
  EXPECT_NE(hung.detail.find("hung"), std::string::npos);
  EXPECT_NE(judge_peer_copy(a, b, true, 20.0, "", {}, gen5).detail.find("unknown"),
            std::string::npos);
}

TEST(DoctorP2p, ChildRunsAreReadFromTheirJsonFinding) {
  const auto child = [](int exit_code, Verdict verdict, const std::string& detail) {
    return ChildResult{exit_code, false,
                       "NCCL INFO noise\n" + findings_json({{"all-reduce", "cuda:0,cuda:1", verdict,
                                                             detail, "fix"}})};
  };
  const PairRun exact = pair_run_of(child(0, Verdict::kOk, "known-answer ...: exact"));
  EXPECT_EQ(exact.outcome, PairRun::Outcome::kExact);
  const PairRun hung =
      pair_run_of(child(1, Verdict::kFail, "hung: rank 1 on cuda:1 did not finish"));
  EXPECT_EQ(hung.outcome, PairRun::Outcome::kHung);
  EXPECT_EQ(hung.detail, "hung: rank 1 on cuda:1 did not finish");
  const PairRun failed = pair_run_of(child(1, Verdict::kFail, "failed: ncclSystemError"));
  EXPECT_EQ(failed.outcome, PairRun::Outcome::kFailed);
  EXPECT_EQ(pair_run_of({-1, true, ""}).outcome, PairRun::Outcome::kHung);
  const PairRun crashed = pair_run_of({-1, false, "Segmentation fault\n"});
  EXPECT_EQ(crashed.outcome, PairRun::Outcome::kFailed);
  EXPECT_NE(crashed.detail.find("no finding printed: Segmentation fault"), std::string::npos);
  EXPECT_EQ(pair_run_of({0, false, "{\"verdict\": garbage"}).outcome, PairRun::Outcome::kFailed);
}

TEST(DoctorP2p, AllReduceVerdicts) {
  const GpuId a{0, ""}, b{1, ""};
  const PairRun ok{PairRun::Outcome::kExact, "exact"};
  const PairRun hung{PairRun::Outcome::kHung, "hung: rank 1 on cuda:1 did not finish in 20000 ms"};
  const PairRun failed{PairRun::Outcome::kFailed, "failed: ncclSystemError"};
  EXPECT_EQ(judge_pair_all_reduce(a, b, ok, ok).verdict, Verdict::kOk);
  const Finding broken_p2p = judge_pair_all_reduce(a, b, hung, ok);
  EXPECT_EQ(broken_p2p.verdict, Verdict::kFail);
  EXPECT_EQ(broken_p2p.subject, "cuda:0<->cuda:1");
  EXPECT_NE(broken_p2p.detail.find("with P2P: hung (hung: rank 1"), std::string::npos)
      << broken_p2p.detail;
  EXPECT_NE(broken_p2p.detail.find("; with NCCL_P2P_DISABLE=1: exact"), std::string::npos);
  EXPECT_NE(broken_p2p.fix.find("NCCL_P2P_DISABLE=1"), std::string::npos);
  EXPECT_NE(broken_p2p.fix.find("iommu=pt"), std::string::npos);
  const Finding both = judge_pair_all_reduce(a, b, failed, failed);
  EXPECT_EQ(both.verdict, Verdict::kFail);
  EXPECT_NE(both.detail.find("failed (failed: ncclSystemError)"), std::string::npos) << both.detail;
  EXPECT_NE(both.fix.find("even without peer-to-peer"), std::string::npos);
}

TEST(DoctorP2p, OneOrNoGpuIsNotApplicable) {
  bool wedged = true;
  EXPECT_EQ(check_p2p({}, {}, {}, std::chrono::milliseconds(100), &wedged)[0].verdict,
            Verdict::kNotApplicable);
  EXPECT_FALSE(wedged);
  EXPECT_EQ(check_p2p({}, {GpuId{0, ""}}, {LinkBound{}}, std::chrono::milliseconds(100), &wedged)[0]
                .detail,
            "one GPU: no pair to check");
}

// The child for the runner's tests below: only run through run_self.
TEST(DoctorChild, DISABLED_PrintsEnvironmentAndSleeps) {
  const char* value = std::getenv("LOCKSTEP_DOCTOR_TEST_VALUE");
  std::printf("child sees %s\n", value ? value : "nothing");
  std::fflush(stdout);
  if (std::getenv("LOCKSTEP_DOCTOR_TEST_SLEEP"))
    std::this_thread::sleep_for(std::chrono::seconds(30));
}

TEST(DoctorChild, RunSelfPassesTheEnvironmentAndBoundsTheWait) {
  const std::vector<std::string> args = {"--gtest_also_run_disabled_tests",
                                         "--gtest_filter=DoctorChild.DISABLED_*"};
  const ChildResult quick =
      run_self(args, {"LOCKSTEP_DOCTOR_TEST_VALUE=42"}, std::chrono::seconds(60));
  EXPECT_FALSE(quick.timed_out);
  EXPECT_EQ(quick.exit_code, 0) << quick.output;
  EXPECT_NE(quick.output.find("child sees 42"), std::string::npos) << quick.output;
  const auto start = std::chrono::steady_clock::now();
  const ChildResult stuck =
      run_self(args, {"LOCKSTEP_DOCTOR_TEST_VALUE=7", "LOCKSTEP_DOCTOR_TEST_SLEEP=1"},
               std::chrono::milliseconds(1500));
  EXPECT_TRUE(stuck.timed_out);
  EXPECT_EQ(stuck.exit_code, -1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace ls::doctor
