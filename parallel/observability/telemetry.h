// Training telemetry: what each device was doing in the seconds before a run froze, hung or the
// machine reset. A background thread samples every device every `interval`: the step being run,
// the caching allocator's memory in use, peak and reserved, and on GPUs power, temperature,
// clocks and throttle reasons (NVML through engine/core/gpu_monitor.h, when the driver has it).
// Each sample is one JSON line appended to the file and flushed to the disk (fdatasync) before
// the next, so a reset loses at most the sample being written. Lines:
//   {"event": "start", "time": "2026-12-03T07:40:00.000Z", "pid": 123, "devices": [...]}
//   {"event": "sample", "time": ..., "t_s": 12.0, "device": "cuda:0", "step": 42,
//    "memory_in_use": ..., "memory_peak": ..., "memory_reserved": ...[, "power_w": ...,
//    "power_limit_w": ..., "temperature_c": ..., "sm_clock_mhz": ..., "max_sm_clock_mhz": ...,
//    "throttle": "sw power cap", "throttle_bits": 4]}
//   {"event": "stop", "time": ..., "samples": N}   (absent when the process died; "sampler":
//    "abandoned: ..." when the sampler was stuck at exit)
// A sample whose allocator was busy (a replica inside a system allocation) repeats the last
// memory values with "memory_busy": true.
// The sampler only reads (an atomic step, the allocators' locked counters, NVML); it never waits
// for a replica, so a hung step cannot stop it. Its state is shared with the thread, so the
// destructor can abandon a sampler stuck in the driver (a GPU fallen off the bus) instead of
// hanging the program's exit.
// Thread-safety: set_step() and last_samples() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/device.h>
#include "engine/core/gpu_monitor.h"

namespace ls {

class TelemetryRecorder {
 public:
  // Opens (appends to) `path` and starts sampling. Raises ls::Error (kind io) when the file
  // cannot be opened, (kind usage) for a non-positive interval.
  TelemetryRecorder(std::string path, std::chrono::milliseconds interval,
                    std::vector<Device> devices);
  // The same with the GPU metrics from `monitor` for the devices whose pci_bus_ids entry is not
  // empty (the constructor above passes NVML and the GPUs' bus ids; tests pass fixtures).
  TelemetryRecorder(std::string path, std::chrono::milliseconds interval,
                    std::vector<Device> devices, std::unique_ptr<GpuMonitor> monitor,
                    std::vector<std::string> pci_bus_ids);
  // A last sample and the stop line, then the thread is joined; a sampler stuck for 2 s (in
  // the driver) is abandoned instead.
  ~TelemetryRecorder();
  TelemetryRecorder(const TelemetryRecorder&) = delete;
  TelemetryRecorder& operator=(const TelemetryRecorder&) = delete;

  // The step being run (or last run): what the next samples record.
  void set_step(int64_t step);
  const std::string& path() const;
  // "telemetry in FILE; last samples: cuda:0 at 12.0 s: step 42, 1.20 GiB in use (peak
  // 1.50 GiB), 350 W of 700 W, 81 C, SM 1980 of 1980 MHz, throttle none; ...": what a hang
  // report appends.
  std::string last_samples() const;
  // Samples written so far (tests and the overhead measurement).
  int64_t samples_written() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace ls
