// lockstep-doctor's comparisons across processes on fixture facts: the same processes give one
// OK finding per check; each difference gives a finding naming the process and its host (FAIL
// for the version, the build, the device kind and a GPU driven twice on one host; WARN for the
// device count); facts and findings survive their encoding. The run under mpirun is the ctest
// doctor_mpi_np2 (tests/programs/doctor_mpi_test.sh).
#include "tools/doctor/world_checks.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <lockstep/error.h>

namespace ls::doctor {
namespace {

ProcessFacts facts(int process, const std::string& host, int gpus_from = -1) {
  ProcessFacts p;
  p.process = process;
  p.host = host;
  p.version = "0.1.0";
  p.build = "CUDA runtime 13.0, NCCL 2.28.3, MPI";
  p.kind = "cuda";
  p.devices = "cuda:0,cuda:1";
  p.device_count = 2;
  p.first_replica = 2 * process;
  const int first = gpus_from < 0 ? 0 : gpus_from;
  p.gpu_bus_ids = {"0000:1" + std::to_string(first) + ":00.0",
                   "0000:1" + std::to_string(first + 1) + ":00.0"};
  return p;
}

const Finding* find(const Findings& findings, const std::string& check) {
  for (const Finding& f : findings) {
    if (f.check == check) return &f;
  }
  return nullptr;
}

TEST(DoctorWorld, TheSameProcessesGiveOneOkFindingPerCheck) {
  const Findings findings = check_world_facts({facts(0, "a"), facts(1, "b"), facts(2, "c")});
  ASSERT_EQ(findings.size(), 4u);
  for (const char* check : {"world-version", "world-build", "world-devices", "world-gpus"}) {
    const Finding* f = find(findings, check);
    ASSERT_NE(f, nullptr) << check;
    EXPECT_EQ(f->verdict, Verdict::kOk) << check;
    EXPECT_EQ(f->subject, "3 processes");
  }
  EXPECT_EQ(find(findings, "world-version")->detail, "the same lockstep everywhere: 0.1.0");
  EXPECT_EQ(find(findings, "world-devices")->detail, "2 cuda device(s) in every process");
}

TEST(DoctorWorld, EachDifferenceNamesTheProcessAndItsHost) {
  ProcessFacts old_build = facts(1, "node-b");
  old_build.version = "0.0.9";
  old_build.build = "CUDA runtime 12.4, NCCL 2.21.5, MPI";
  ProcessFacts host_devices = facts(2, "node-c");
  host_devices.kind = "host";
  host_devices.devices = "host:0,host:1";
  host_devices.gpu_bus_ids.clear();
  ProcessFacts fewer = facts(3, "node-d");
  fewer.devices = "cuda:0";
  fewer.device_count = 1;
  fewer.gpu_bus_ids.resize(1);
  const Findings findings = check_world_facts({facts(0, "node-a"), old_build, host_devices, fewer});
  ASSERT_EQ(findings.size(), 5u);
  EXPECT_EQ(findings[0].check, "world-version");
  EXPECT_EQ(findings[0].verdict, Verdict::kFail);
  EXPECT_EQ(findings[0].subject, "p1 (node-b)");
  EXPECT_EQ(findings[0].detail, "lockstep 0.0.9; p0 (node-a) has 0.1.0");
  EXPECT_FALSE(findings[0].fix.empty());
  EXPECT_EQ(findings[1].check, "world-build");
  EXPECT_EQ(findings[1].verdict, Verdict::kFail);
  EXPECT_EQ(findings[1].subject, "p1 (node-b)");
  EXPECT_EQ(findings[1].detail,
            "build CUDA runtime 12.4, NCCL 2.21.5, MPI; p0 (node-a) has CUDA runtime 13.0, NCCL "
            "2.28.3, MPI");
  EXPECT_EQ(findings[2].check, "world-devices");
  EXPECT_EQ(findings[2].verdict, Verdict::kFail);
  EXPECT_EQ(findings[2].subject, "p2 (node-c)");
  EXPECT_EQ(findings[2].detail,
            "host devices (host:0,host:1); p0 (node-a) drives cuda devices (cuda:0,cuda:1)");
  EXPECT_EQ(findings[3].check, "world-devices");
  EXPECT_EQ(findings[3].verdict, Verdict::kWarn);
  EXPECT_EQ(findings[3].subject, "p3 (node-d)");
  EXPECT_EQ(findings[3].detail, "1 device(s) (cuda:0); p0 (node-a) drives 2 (cuda:0,cuda:1)");
  EXPECT_EQ(findings[4].check, "world-gpus");  // every GPU on its own host: fine
  EXPECT_EQ(findings[4].verdict, Verdict::kOk);
  EXPECT_EQ(overall_verdict(findings), Verdict::kFail);
}

TEST(DoctorWorld, TwoProcessesOnOneHostDrivingOneGpuFail) {
  // p0 and p1 share host "a" and both took every GPU (--devices auto in each): a FAIL for each
  // shared GPU. p2 on host "b" has GPUs with the same bus ids: another machine, no problem.
  const Findings findings = check_world_facts({facts(0, "a"), facts(1, "a"), facts(2, "b")});
  std::vector<const Finding*> gpus;
  for (const Finding& f : findings) {
    if (f.check == "world-gpus") gpus.push_back(&f);
  }
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->verdict, Verdict::kFail);
  EXPECT_EQ(gpus[0]->subject, "p0,p1 (a)");
  EXPECT_EQ(gpus[0]->detail,
            "both drive the GPU at 0000:10:00.0 (cuda:0,cuda:1 and cuda:0,cuda:1)");
  EXPECT_NE(gpus[0]->fix.find("CUDA_VISIBLE_DEVICES"), std::string::npos);
  EXPECT_EQ(gpus[1]->detail.find("both drive the GPU at 0000:11:00.0"), 0u);
  // Each process on its own GPUs (CUDA_VISIBLE_DEVICES renumbers both to cuda:0,1): OK.
  const Findings split = check_world_facts({facts(0, "a", 0), facts(1, "a", 2)});
  EXPECT_EQ(find(split, "world-gpus")->verdict, Verdict::kOk);
}

TEST(DoctorWorld, HostDevicesHaveNoGpuFinding) {
  ProcessFacts p0 = facts(0, "a");
  p0.kind = "host";
  p0.gpu_bus_ids.clear();
  ProcessFacts p1 = p0;
  p1.process = 1;
  const Findings findings = check_world_facts({p0, p1});
  EXPECT_EQ(findings.size(), 3u);
  EXPECT_EQ(find(findings, "world-gpus"), nullptr);
  EXPECT_EQ(p0.gpu_count(), 0);
  EXPECT_EQ(facts(0, "a").gpu_count(), 2);
}

TEST(DoctorWorld, FactsAndFindingsSurviveTheirEncoding) {
  ProcessFacts p = facts(3, "node:with:colons");
  p.build = "odd: 12:34 \n text";
  const ProcessFacts back = decode_facts(encode_facts(p));
  EXPECT_EQ(back.process, 3);
  EXPECT_EQ(back.host, p.host);
  EXPECT_EQ(back.build, p.build);
  EXPECT_EQ(back.devices, p.devices);
  EXPECT_EQ(back.device_count, 2);
  EXPECT_EQ(back.first_replica, 6);
  EXPECT_EQ(back.gpu_bus_ids, p.gpu_bus_ids);

  const Findings findings = {{"cores", "host", Verdict::kWarn, "3:2", "fix: it"},
                             {"p2p", "cuda:0<->cuda:1", Verdict::kNotApplicable, "", ""}};
  const Findings again = decode_findings(encode_findings(findings));
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].detail, "3:2");
  EXPECT_EQ(again[0].verdict, Verdict::kWarn);
  EXPECT_EQ(again[1].verdict, Verdict::kNotApplicable);
  EXPECT_EQ(again[1].subject, "cuda:0<->cuda:1");
  EXPECT_TRUE(decode_findings("").empty());

  EXPECT_THROW(decode_findings("12:short"), Error);
  EXPECT_THROW(decode_findings("x:abc"), Error);
  EXPECT_THROW(decode_facts(encode_findings(findings).substr(0, 20)), Error);
}

TEST(DoctorWorld, TheLocalChecksLimitGrowsWithThePairs) {
  using std::chrono::milliseconds;
  const milliseconds t(1000);
  EXPECT_EQ(local_checks_limit(0, t), local_checks_limit(1, t));
  EXPECT_GT(local_checks_limit(2, t), local_checks_limit(1, t));
  // 8 GPUs: 28 pairs, each a copy and two child all-reduces.
  EXPECT_GE(local_checks_limit(8, t), 28 * (3 * t + std::chrono::seconds(60)));
}

}  // namespace
}  // namespace ls::doctor
