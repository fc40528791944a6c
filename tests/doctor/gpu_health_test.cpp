// The sharing, gpu-memory and power-thermal checks on fixture GPUs: a GpuMonitor that answers
// with canned readings, as NVML would on a healthy GPU, a shared one, a prohibited one, a
// throttling one, one at its power cap, and without NVML at all.
#include "tools/doctor/gpu_health.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/fixture_gpu_monitor.h"

namespace ls::doctor {
namespace {

constexpr pid_t kSelf = 1000;
constexpr int64_t kGiB = int64_t{1} << 30;

using testing::FixtureMonitor;

// An idle H100-like GPU: 80 W of 700 W, 38 C, full clocks, 79 of 80 GiB free, only us on it.
GpuSample healthy_sample() {
  GpuSample s;
  s.power_w = 80;
  s.power_limit_w = 700;
  s.temperature_c = 38;
  s.sm_clock_mhz = 1980;
  s.max_sm_clock_mhz = 1980;
  s.throttle_reasons_known = true;
  s.throttle_reasons = kThrottleGpuIdle;
  s.memory_total_bytes = 80 * kGiB;
  s.memory_used_bytes = 1 * kGiB;
  s.memory_free_bytes = 79 * kGiB;
  return s;
}

const std::vector<GpuId> kTwoGpus = {{0, "0000:3B:00.0"}, {1, "0000:5E:00.0"}};

void add_healthy(FixtureMonitor& monitor, const std::string& bus_id) {
  FixtureMonitor::Gpu& gpu = monitor.add(bus_id);
  gpu.sample = healthy_sample();
  gpu.processes = std::vector<GpuProcess>{{kSelf, 1 * kGiB, "lockstep-doctor"}};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(GpuHealth, HealthyGpusAreOkInEveryCheck) {
  FixtureMonitor monitor;
  // NVML spells bus ids with an 8-digit domain; the doctor's GpuIds come from CUDA.
  add_healthy(monitor, "00000000:3B:00.0");
  add_healthy(monitor, "00000000:5E:00.0");
  for (const Findings& findings :
       {check_sharing(monitor, kTwoGpus, kSelf), check_memory(monitor, kTwoGpus, kSelf),
        check_power_thermal(monitor, kTwoGpus)}) {
    ASSERT_EQ(findings.size(), 2u);
    for (const Finding& f : findings) {
      EXPECT_EQ(f.verdict, Verdict::kOk) << f.check << " " << f.subject << ": " << f.detail;
      EXPECT_TRUE(f.fix.empty()) << f.fix;
    }
    EXPECT_EQ(findings[0].subject, "cuda:0");
    EXPECT_EQ(findings[1].subject, "cuda:1");
  }
  const Finding sharing = check_sharing(monitor, kTwoGpus, kSelf)[0];
  EXPECT_EQ(sharing.check, "sharing");
  EXPECT_EQ(sharing.detail, "no other compute process; compute mode Default");
  EXPECT_EQ(check_memory(monitor, kTwoGpus, kSelf)[0].detail, "79.0 GiB free of 80.0 GiB");
  EXPECT_EQ(check_power_thermal(monitor, kTwoGpus)[0].detail,
            "80 W of 700 W, 38 C, SM 1980 of 1980 MHz, clocks held by: gpu idle");
}

TEST(GpuHealth, AGpuSharedWithAnotherJobWarnsNamingItsPidAndMemory) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  add_healthy(monitor, "0000:5E:00.0");
  monitor.add("0000:5E:00.0").processes->push_back({4242, 20 * kGiB, "python"});
  const Findings findings = check_sharing(monitor, kTwoGpus, kSelf);
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_EQ(findings[0].verdict, Verdict::kOk);
  EXPECT_EQ(findings[1].verdict, Verdict::kWarn);
  EXPECT_EQ(findings[1].detail, "shared with pid 4242 (python, 20.0 GiB); compute mode Default");
  EXPECT_TRUE(contains(findings[1].fix, "collectives wait on its kernels")) << findings[1].fix;
  EXPECT_TRUE(contains(findings[1].fix, "stragglers look like hangs")) << findings[1].fix;
  EXPECT_FALSE(contains(findings[1].detail, "1000")) << "our own pid is not 'another job'";
  EXPECT_EQ(overall_verdict(findings), Verdict::kWarn);
}

TEST(GpuHealth, LowFreeMemoryWarnsNamingTheProcessesThatHoldIt) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  FixtureMonitor::Gpu& gpu = monitor.add("0000:3B:00.0");
  gpu.processes->push_back({4242, 20 * kGiB, "python"});
  gpu.processes->push_back({4343, 57 * kGiB, "jupyter"});
  gpu.sample.memory_used_bytes = 78 * kGiB + kGiB / 2;
  gpu.sample.memory_free_bytes = kGiB + kGiB / 2;
  const Findings findings = check_memory(monitor, {kTwoGpus[0]}, kSelf);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].check, "gpu-memory");
  EXPECT_EQ(findings[0].verdict, Verdict::kWarn);
  // Biggest holder first; ourselves left out.
  EXPECT_EQ(findings[0].detail,
            "1.5 GiB free of 80.0 GiB; held by pid 4343 (jupyter, 57.0 GiB), pid 4242 (python, "
            "20.0 GiB)");
  EXPECT_TRUE(contains(findings[0].fix, "allocates its buffers up front")) << findings[0].fix;
}

TEST(GpuHealth, LessThanATenthFreeWarnsEvenWithGibibytesLeft) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  GpuSample& s = monitor.add("0000:3B:00.0").sample;
  s.memory_free_bytes = 7 * kGiB;  // 8.75% of 80 GiB
  s.memory_used_bytes = 73 * kGiB;
  EXPECT_EQ(check_memory(monitor, {kTwoGpus[0]}, kSelf)[0].verdict, Verdict::kWarn);
  s.memory_free_bytes = 9 * kGiB;  // 11%
  EXPECT_EQ(check_memory(monitor, {kTwoGpus[0]}, kSelf)[0].verdict, Verdict::kOk);
}

TEST(GpuHealth, ComputeModeProhibitedFails) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  monitor.add("0000:3B:00.0").mode = ComputeMode::kProhibited;
  const Findings findings = check_sharing(monitor, {kTwoGpus[0]}, kSelf);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].verdict, Verdict::kFail);
  EXPECT_TRUE(contains(findings[0].detail, "Prohibited")) << findings[0].detail;
  // nvidia-smi is pointed at the bus id: its indices need not be CUDA's.
  EXPECT_TRUE(contains(findings[0].fix, "nvidia-smi -i 0000:3B:00.0 -c DEFAULT"))
      << findings[0].fix;
}

TEST(GpuHealth, ExclusiveProcessFailsOnlyWhenAnotherProcessHoldsIt) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  FixtureMonitor::Gpu& gpu = monitor.add("0000:3B:00.0");
  gpu.mode = ComputeMode::kExclusiveProcess;
  Finding alone = check_sharing(monitor, {kTwoGpus[0]}, kSelf)[0];
  EXPECT_EQ(alone.verdict, Verdict::kOk) << alone.detail;
  EXPECT_TRUE(contains(alone.detail, "Exclusive_Process")) << alone.detail;
  gpu.processes->push_back({4242, 20 * kGiB, "python"});
  const Finding held = check_sharing(monitor, {kTwoGpus[0]}, kSelf)[0];
  EXPECT_EQ(held.verdict, Verdict::kFail);
  EXPECT_TRUE(contains(held.detail, "pid 4242")) << held.detail;
  EXPECT_TRUE(contains(held.detail, "cannot create its context")) << held.detail;
}

TEST(GpuHealth, UnlistableProcessesAreNotApplicableNotOk) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  monitor.add("0000:3B:00.0").processes = std::nullopt;  // e.g. NVML_ERROR_NO_PERMISSION
  const Finding f = check_sharing(monitor, {kTwoGpus[0]}, kSelf)[0];
  EXPECT_EQ(f.verdict, Verdict::kNotApplicable);
  EXPECT_TRUE(contains(f.detail, "would not list")) << f.detail;
}

TEST(GpuHealth, HardwareThermalSlowdownFailsWithCoolingAndPowerAdvice) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  GpuSample& s = monitor.add("0000:3B:00.0").sample;
  s.power_w = 455;
  s.temperature_c = 91;
  s.sm_clock_mhz = 1100;
  s.throttle_reasons = kThrottleHwSlowdown | kThrottleHwThermalSlowdown;
  const Findings findings = check_power_thermal(monitor, {kTwoGpus[0]});
  ASSERT_EQ(findings.size(), 1u);
  const Finding& f = findings[0];
  EXPECT_EQ(f.check, "power-thermal");
  EXPECT_EQ(f.verdict, Verdict::kFail);
  EXPECT_EQ(f.detail,
            "455 W of 700 W, 91 C, SM 1100 of 1980 MHz, clocks held by: hw slowdown, hw thermal "
            "slowdown");
  EXPECT_TRUE(contains(f.fix, "Overheating")) << f.fix;
  EXPECT_TRUE(contains(f.fix, "fans, airflow")) << f.fix;
  EXPECT_TRUE(contains(f.fix, "resets under load come from power")) << f.fix;
  EXPECT_FALSE(contains(f.fix, "Hot (")) << "the FAIL already says it: " << f.fix;
}

TEST(GpuHealth, PowerBrakeFailsPointingAtThePowerSupply) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  GpuSample& s = monitor.add("0000:3B:00.0").sample;
  s.throttle_reasons = kThrottleHwSlowdown | kThrottleHwPowerBrakeSlowdown;
  const Finding f = check_power_thermal(monitor, {kTwoGpus[0]})[0];
  EXPECT_EQ(f.verdict, Verdict::kFail);
  EXPECT_TRUE(contains(f.fix, "power supply told the GPU to slow down")) << f.fix;
  EXPECT_TRUE(contains(f.fix, "cables")) << f.fix;
}

TEST(GpuHealth, AGpuAtItsPowerCapWarns) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  GpuSample& s = monitor.add("0000:3B:00.0").sample;
  s.power_w = 699.4;
  s.temperature_c = 72;
  s.sm_clock_mhz = 1755;
  s.throttle_reasons = kThrottleSwPowerCap;
  Finding f = check_power_thermal(monitor, {kTwoGpus[0]})[0];
  EXPECT_EQ(f.verdict, Verdict::kWarn);
  EXPECT_EQ(f.detail, "699 W of 700 W, 72 C, SM 1755 of 1980 MHz, clocks held by: sw power cap");
  EXPECT_TRUE(contains(f.fix, "At its power limit")) << f.fix;
  EXPECT_TRUE(contains(f.fix, "nvidia-smi -i 0000:3B:00.0 -pl")) << f.fix;
  // Drawing the limit is a WARN even when the driver reports no reason.
  s.throttle_reasons = 0;
  f = check_power_thermal(monitor, {kTwoGpus[0]})[0];
  EXPECT_EQ(f.verdict, Verdict::kWarn);
  EXPECT_TRUE(contains(f.detail, "clocks held by: none")) << f.detail;
}

TEST(GpuHealth, SoftwareThermalSlowdownAndHeatWarn) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  GpuSample& s = monitor.add("0000:3B:00.0").sample;
  s.temperature_c = 87;
  s.throttle_reasons = kThrottleSwThermalSlowdown;
  const Finding f = check_power_thermal(monitor, {kTwoGpus[0]})[0];
  EXPECT_EQ(f.verdict, Verdict::kWarn);
  EXPECT_TRUE(contains(f.fix, "SW thermal slowdown")) << f.fix;
  EXPECT_TRUE(contains(f.fix, "Hot (87 C)")) << f.fix;
}

TEST(GpuHealth, BenignClockReasonsAndUnknownValuesAreOk) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  GpuSample& s = monitor.add("0000:3B:00.0").sample;
  s.throttle_reasons =
      kThrottleApplicationsClocksSetting | kThrottleSyncBoost | kThrottleDisplayClockSetting;
  EXPECT_EQ(check_power_thermal(monitor, {kTwoGpus[0]})[0].verdict, Verdict::kOk);
  s = GpuSample{};  // a board that reports nothing
  const Finding f = check_power_thermal(monitor, {kTwoGpus[0]})[0];
  EXPECT_EQ(f.verdict, Verdict::kOk);
  EXPECT_EQ(f.detail, "clocks held by: unknown");
  EXPECT_EQ(check_memory(monitor, {kTwoGpus[0]}, kSelf)[0].verdict, Verdict::kNotApplicable);
}

TEST(GpuHealth, WithoutNvmlEveryCheckIsOneNotApplicableSayingWhy) {
  FixtureMonitor monitor;
  monitor.unavailable = "NVML not loaded (libnvidia-ml.so.1: cannot open shared object file)";
  for (const Findings& findings :
       {check_sharing(monitor, kTwoGpus, kSelf), check_memory(monitor, kTwoGpus, kSelf),
        check_power_thermal(monitor, kTwoGpus)}) {
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].verdict, Verdict::kNotApplicable);
    EXPECT_EQ(findings[0].subject, "host");
    EXPECT_EQ(findings[0].detail, monitor.unavailable);
  }
}

TEST(GpuHealth, WithoutGpusEveryCheckIsNotApplicable) {
  FixtureMonitor monitor;
  for (const Findings& findings :
       {check_sharing(monitor, {}, kSelf), check_memory(monitor, {}, kSelf),
        check_power_thermal(monitor, {}),
        check_xid(KernelLog{"NVRM: Xid (PCI:0000:3b:00): 79,", ""}, {})}) {
    ASSERT_EQ(findings.size(), 1u);
    EXPECT_EQ(findings[0].verdict, Verdict::kNotApplicable);
    EXPECT_EQ(findings[0].detail, "no GPU");
  }
}

TEST(GpuHealth, AGpuTheDriverDoesNotKnowIsNotApplicableAlone) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");  // cuda:1 at 5E is missing
  for (const Findings& findings :
       {check_sharing(monitor, kTwoGpus, kSelf), check_memory(monitor, kTwoGpus, kSelf),
        check_power_thermal(monitor, kTwoGpus)}) {
    ASSERT_EQ(findings.size(), 2u);
    EXPECT_EQ(findings[0].verdict, Verdict::kOk);
    EXPECT_EQ(findings[1].verdict, Verdict::kNotApplicable);
    EXPECT_TRUE(contains(findings[1].detail, "NVML has no GPU at 0000:5E:00.0"))
        << findings[1].detail;
  }
}

TEST(GpuHealth, FindingsPrintAsOneVerdictLineEach) {
  FixtureMonitor monitor;
  add_healthy(monitor, "0000:3B:00.0");
  add_healthy(monitor, "0000:5E:00.0");
  GpuSample& s = monitor.add("0000:5E:00.0").sample;
  s.temperature_c = 91;
  s.throttle_reasons = kThrottleHwThermalSlowdown;
  const std::string table = findings_table(check_power_thermal(monitor, kTwoGpus));
  EXPECT_TRUE(contains(table, "OK    power-thermal  cuda:0")) << table;
  EXPECT_TRUE(contains(table, "FAIL  power-thermal  cuda:1")) << table;
  EXPECT_TRUE(contains(table, "      fix: Overheating")) << table;
}

}  // namespace
}  // namespace ls::doctor
