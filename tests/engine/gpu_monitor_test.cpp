// The GPU monitor's shared parts (bus id spelling, throttle reason names) and the NVML monitor
// where NVML is missing or is not NVML: it must say why and answer "unknown", never crash.
#include "engine/core/gpu_monitor.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace ls {
namespace {

TEST(GpuMonitor, NormalizesEverySpellingOfABusId) {
  EXPECT_EQ(normalize_pci_bus_id("00000000:3B:00.0"), "0000:3b:00.0");  // NVML
  EXPECT_EQ(normalize_pci_bus_id("0000:3B:00.0"), "0000:3b:00.0");      // CUDA
  EXPECT_EQ(normalize_pci_bus_id("0000:3b:00.0"), "0000:3b:00.0");      // sysfs
  EXPECT_EQ(normalize_pci_bus_id("0000:3b:00"), "0000:3b:00.0");        // Xid lines
  EXPECT_EQ(normalize_pci_bus_id("3b:00.0"), "0000:3b:00.0");           // no domain
  EXPECT_EQ(normalize_pci_bus_id(" 0001:AF:1f.7\n"), "0001:af:1f.7");
  EXPECT_EQ(normalize_pci_bus_id("10000:01:00.0"), "10000:01:00.0");  // a VMD domain
  for (const char* bad : {"", "cuda:0", "0000:3b:20.0", "0000:3b:00.8", "0000:zz:00.0",
                          "0000:3b:00.0.0", "000000000:3b:00.0", "0000::00.0", "3b"}) {
    EXPECT_EQ(normalize_pci_bus_id(bad), "") << bad;
  }
}

TEST(GpuMonitor, NamesThrottleReasons) {
  EXPECT_EQ(throttle_reason_names(0), "none");
  EXPECT_EQ(throttle_reason_names(kThrottleSwPowerCap | kThrottleHwThermalSlowdown),
            "sw power cap, hw thermal slowdown");
  EXPECT_EQ(throttle_reason_names(kThrottleGpuIdle | 0x200), "gpu idle, 0x200");
  EXPECT_STREQ(compute_mode_name(ComputeMode::kExclusiveProcess), "Exclusive_Process");
}

void expect_answers_unknown(GpuMonitor& monitor) {
  EXPECT_FALSE(monitor.device_error("0000:3b:00.0").empty());
  EXPECT_FALSE(monitor.sample("0000:3b:00.0").has_value());
  EXPECT_FALSE(monitor.processes("0000:3b:00.0").has_value());
  EXPECT_FALSE(monitor.compute_mode("0000:3b:00.0").has_value());
}

TEST(GpuMonitor, NvmlMonitorOnThisMachineSaysWhyOrAnswers) {
  std::unique_ptr<GpuMonitor> monitor = make_nvml_monitor();
  const std::string reason = monitor->unavailable_reason();
  if (reason.empty()) {
    // A machine with the driver: a bus id with no GPU behind it is an error, not a crash.
    EXPECT_FALSE(monitor->device_error("0000:ff:1f.7").empty());
    EXPECT_FALSE(monitor->sample("0000:ff:1f.7").has_value());
    GTEST_SKIP() << "NVML is available here; its unavailable path is tested with a bad library";
  }
  EXPECT_NE(reason.find("NVML"), std::string::npos) << reason;
  expect_answers_unknown(*monitor);
  // The shared library is loaded once: a second monitor says the same.
  EXPECT_EQ(make_nvml_monitor()->unavailable_reason(), reason);
}

TEST(GpuMonitor, AMissingLibraryIsUnavailableWithTheLoadersReason) {
  std::unique_ptr<GpuMonitor> monitor = make_nvml_monitor("/nonexistent/libnvidia-ml.so.1");
  const std::string reason = monitor->unavailable_reason();
  EXPECT_NE(reason.find("NVML not loaded"), std::string::npos) << reason;
  EXPECT_NE(reason.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << reason;
  expect_answers_unknown(*monitor);
}

TEST(GpuMonitor, ALibraryThatIsNotNvmlIsUnavailable) {
  std::unique_ptr<GpuMonitor> monitor = make_nvml_monitor("libc.so.6");
  const std::string reason = monitor->unavailable_reason();
  EXPECT_NE(reason.find("is not NVML"), std::string::npos) << reason;
  expect_answers_unknown(*monitor);
}

TEST(GpuMonitor, NvmlMonitorCanBeQueriedFromManyThreads) {
  // Telemetry samples from the replica threads; with or without NVML that must be safe.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      std::unique_ptr<GpuMonitor> monitor = make_nvml_monitor();
      for (int i = 0; i < 100; ++i) {
        monitor->sample("0000:3b:00.0");
        monitor->processes("0000:3b:00.0");
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace ls
