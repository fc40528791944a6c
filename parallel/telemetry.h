// Training telemetry: what each device was doing in the seconds before a run froze, hung or the
// machine reset. A background thread samples every device every `interval`: the step being run,
// the caching allocator's memory in use, peak and reserved, and on GPUs power, temperature,
// clocks and throttle reasons (NVML, engine/core/gpu_monitor.h, when the driver has it). Each
// sample is one JSON line appended to the file and flushed to the disk (fdatasync) before the
// next, so a reset loses at most the sample being written. Lines:
//   {"event":"start","time":"2026-12-03T07:40:00.000Z","pid":123,"devices":["cuda:0",...]}
//   {"event":"sample","time":...,"t_s":12.0,"device":"cuda:0","step":42,"memory_in_use":...,
//    "memory_peak":...,"memory_reserved":...[,"power_w":...,"power_limit_w":...,
//    "temperature_c":...,"sm_clock_mhz":...,"max_sm_clock_mhz":...,"throttle":"..."]}
//   {"event":"stop",...}   (absent when the process died)
// The sampler only reads (an atomic step counter, the allocator's locked counters, NVML); it
// never waits for a replica, so a hung step cannot stop it. last_samples() is the hang report's
// view of the newest sample of each device.
// Thread-safety: last_samples() from any thread; the rest from the owner's.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/device.h"

namespace ls {

class TelemetryRecorder {
 public:
  // Opens (appends to) `path` and starts sampling; `current_step` says which step is running.
  // Raises ls::Error (kind io) when the file cannot be opened.
  TelemetryRecorder(std::string path, std::chrono::milliseconds interval,
                    std::vector<Device> devices, std::function<int64_t()> current_step);
  ~TelemetryRecorder();  // a last sample, the stop line, then the thread is joined
  TelemetryRecorder(const TelemetryRecorder&) = delete;
  TelemetryRecorder& operator=(const TelemetryRecorder&) = delete;

  const std::string& path() const { return path_; }
  // "telemetry in FILE; last samples: cuda:0 at 12.0 s: step 42, 1.2 GiB in use, 350 W of
  // 700 W, 81 C, ..."; what a hang report appends.
  std::string last_samples() const;
  // Samples written so far (tests and the overhead benchmark).
  int64_t samples_written() const { return samples_written_.load(); }

 private:
  struct DeviceSample;
  void run();
  void sample_all();
  void write_line(const std::string& line);

  std::string path_;
  std::chrono::milliseconds interval_;
  std::vector<Device> devices_;
  std::function<int64_t()> current_step_;
  std::chrono::steady_clock::time_point start_;
  int fd_ = -1;
  std::atomic<int64_t> samples_written_{0};

  mutable std::mutex mutex_;  // guards last_ and stopping_
  std::vector<std::string> last_;  // per device: the newest sample, described
  bool stopping_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace ls
