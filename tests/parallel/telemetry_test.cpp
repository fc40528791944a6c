// Training telemetry (parallel/observability/telemetry.h): the JSON-lines file a run leaves behind
// (a start line, one sample per device per interval with the running step and memory, a stop line),
// every line on the disk as it is written, and a hang report that names the file and each device's
// last sample.
#include "parallel/observability/telemetry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/json_reader.h"
#include "engine/fixture_gpu_monitor.h"
#include <lockstep/data_parallel.h>
#include "parallel/fault_injection.h"
#include "parallel/random_batch.h"

namespace ls {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() /
          ("lockstep-telemetry-" + std::to_string(::getpid()) + "-" + name + ".jsonl"))
      .string();
}

std::vector<JsonValue> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<JsonValue> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(parse_json(line, path));
  return lines;
}

std::string event(const JsonValue& line) { return line.find("event")->as_string(); }

TEST(Telemetry, StartSamplesPerDeviceAndStopLines) {
  const std::string path = temp_file("lines");
  fs::remove(path);
  {
    TelemetryRecorder recorder(path, std::chrono::milliseconds(20), parse_devices("host:2"));
    recorder.set_step(7);
    while (recorder.samples_written() < 6)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    recorder.set_step(9);
    const int64_t before = recorder.samples_written();
    while (recorder.samples_written() < before + 4)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // Every line written so far is on the disk already, readable while the run goes on.
    const std::vector<JsonValue> live = read_lines(path);
    ASSERT_GE(live.size(), 7u);
    EXPECT_EQ(event(live[0]), "start");
    EXPECT_NE(recorder.last_samples().find("host:1 at "), std::string::npos);
  }
  const std::vector<JsonValue> lines = read_lines(path);
  ASSERT_GE(lines.size(), 2u + 10u);
  EXPECT_EQ(event(lines.front()), "start");
  EXPECT_EQ(lines.front().find("devices")->items().size(), 2u);
  EXPECT_EQ(event(lines.back()), "stop");
  std::vector<int64_t> samples_per_device(2, 0);
  bool saw_step_9 = false;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    ASSERT_EQ(event(lines[i]), "sample");
    const std::string device = lines[i].find("device")->as_string();
    ASSERT_TRUE(device == "host:0" || device == "host:1") << device;
    ++samples_per_device[device == "host:1"];
    const int64_t s = lines[i].find("step")->as_int64();
    EXPECT_TRUE(s == 0 || s == 7 || s == 9) << s;  // 0: a first sample before set_step(7)
    saw_step_9 = saw_step_9 || s == 9;
    EXPECT_GE(lines[i].find("memory_peak")->as_int64(), lines[i].find("memory_in_use")->as_int64());
  }
  EXPECT_EQ(samples_per_device[0], samples_per_device[1]);
  EXPECT_TRUE(saw_step_9);
  EXPECT_EQ(lines.back().find("samples")->as_int64(),
            samples_per_device[0] + samples_per_device[1]);
  fs::remove(path);
}

// A GPU at its power cap, throttled by heat.
std::unique_ptr<testing::FixtureMonitor> hot_gpu_at(const std::string& bus_id) {
  auto monitor = std::make_unique<testing::FixtureMonitor>();
  GpuSample& s = monitor->add(bus_id).sample;
  s.power_w = 700;
  s.power_limit_w = 700;
  s.temperature_c = 91;
  s.sm_clock_mhz = 1100;
  s.max_sm_clock_mhz = 1980;
  s.throttle_reasons_known = true;
  s.throttle_reasons = kThrottleSwPowerCap | kThrottleHwThermalSlowdown;
  return monitor;
}

TEST(Telemetry, GpuMetricsAreRecordedAndReported) {
  const std::string path = temp_file("gpu");
  fs::remove(path);
  {
    // host:1 stands in for a GPU: the monitor is asked by bus id.
    TelemetryRecorder recorder(path, std::chrono::milliseconds(20), parse_devices("host:2"),
                               hot_gpu_at("0000:3b:00.0"), {"", "0000:3b:00.0"});
    while (recorder.samples_written() < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::string report = recorder.last_samples();
    EXPECT_NE(report.find("host:1 at "), std::string::npos) << report;
    EXPECT_NE(report.find("700 W of 700 W, 91 C, SM 1100 of 1980 MHz, throttle sw power cap, "
                          "hw thermal slowdown"),
              std::string::npos)
        << report;
  }
  const std::vector<JsonValue> lines = read_lines(path);
  ASSERT_GE(lines.size(), 4u);
  bool saw_gpu = false;
  for (const JsonValue& line : lines) {
    if (event(line) != "sample") continue;
    const bool gpu = line.find("device")->as_string() == "host:1";
    EXPECT_EQ(line.find("temperature_c") != nullptr, gpu);
    if (!gpu) continue;
    saw_gpu = true;
    EXPECT_EQ(line.find("temperature_c")->as_int64(), 91);
    EXPECT_EQ(line.find("sm_clock_mhz")->as_int64(), 1100);
    EXPECT_EQ(line.find("power_limit_w")->as_double(), 700.0);
    EXPECT_EQ(line.find("throttle_bits")->as_int64(), 0x44);
    EXPECT_EQ(line.find("throttle")->as_string(), "sw power cap, hw thermal slowdown");
  }
  EXPECT_TRUE(saw_gpu);
  fs::remove(path);
}

TEST(Telemetry, UnwritablePathIsAClearIoError) {
  try {
    TelemetryRecorder recorder("/nonexistent-dir/t.jsonl", std::chrono::milliseconds(100),
                               parse_devices("host:1"));
    FAIL() << "expected an ls::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("cannot open the telemetry file '/nonexistent-dir/t.jsonl'"),
              std::string::npos)
        << e.message();
  }
}

TEST(Telemetry, AHangReportNamesTheFileAndTheLastSamples) {
  const std::string path = temp_file("hang");
  fs::remove(path);
  DataParallelOptions options;
  options.timeout = std::chrono::milliseconds(500);
  options.telemetry_path = path;
  options.telemetry_interval = std::chrono::milliseconds(50);
  const testing::Fault fault{testing::Fault::Kind::kSkipCollective, 1, 2, {}};
  std::string message;
  {
    const std::unique_ptr<DataParallel> faulty =
        make_data_parallel(parse_devices("host:2"),
                           testing::with_fault(mlp_factory({16, 32, 10}), fault),
                           make_optimizer_factory({}), options, testing::with_fault(fault));
    DataParallel& dp = *faulty;
    const data::Batch batch = testing::random_batch(8, 16, 1);
    try {
      for (int s = 0; s < 3; ++s) dp.step(batch);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
      message = e.what();
    }
  }
  EXPECT_NE(message.find("telemetry in " + path + "; last samples: host:0 at "), std::string::npos)
      << message;
  EXPECT_NE(message.find("host:1 at "), std::string::npos) << message;
  EXPECT_NE(message.find("step 2"), std::string::npos) << message;
  const std::vector<JsonValue> lines = read_lines(path);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(event(lines.back()), "stop");
  fs::remove(path);
}

TEST(Telemetry, BadIntervalIsAUsageError) {
  DataParallelOptions options;
  options.telemetry_path = temp_file("interval");
  options.telemetry_interval = std::chrono::milliseconds(0);
  EXPECT_THROW(DataParallel(parse_devices("host:1"), mlp_factory({4, 2}),
                            make_optimizer_factory({}), options),
               Error);
}

}  // namespace
}  // namespace ls
