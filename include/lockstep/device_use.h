// How each device spent a run's steps, and a verdict in one sentence ("does my training use both
// GPUs?"; docs/device-use.md).
//
// Every data-parallel step stamps five points with the device's own clock, in stream order
// (the step marks): the step's start, its input on the device, the end of
// backward, the gradients' sums arrived, the step's end. From them each device's time splits
// into four parts that add up to its window (the measured steps and the gaps between them):
//   input:     the step's input staged and copied onto the device;
//   compute:   forward, backward, the loss all-reduce and the optimizer, including any wait for
//              the host to enqueue them;
//   comm wait: after backward, waiting for the gradients' sums: communication that backward
//              did not hide, plus waiting for slower devices to reach the same all-reduce;
//   idle:      between steps, nothing enqueued: the device waited for the next step (the next
//              batch from the caller's loader, or the caller's own code between steps);
//   bubble:    pipeline stages only: between its micro-batches' forward and backward actions,
//              waiting for a neighbour stage's activations or gradients. A pipeline stage's comm
//              wait is its all-reduce with the other pipelines and the tied weights' sums.
// The least comm wait over the devices is what every device waits: the exposed communication;
// a device's comm wait above it is time spent waiting for the slowest device.
// The first steps are not measured (warm-up and the graph capture); evaluation and checkpoints
// between steps are not counted as idle. Several processes: each process measures its own devices,
// and Trainer::device_use_all_processes() gathers them all.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/json.h>

namespace ls {

struct DeviceUse {
  Device device;
  int replica = 0;       // global replica number
  int process = -1;      // several processes (Trainer::device_use_all_processes): whose device
  int64_t steps = 0;     // steps measured
  double window_ms = 0;  // input + compute + comm_wait + idle + bubble
  double input_ms = 0;   // totals over the measured steps (milliseconds, the device's clock)
  double compute_ms = 0;
  double comm_wait_ms = 0;
  double idle_ms = 0;
  double bubble_ms = 0;  // pipeline stages
  // A part's share of the window (0 when nothing was measured).
  double share(double ms) const { return window_ms > 0 ? ms / window_ms : 0.0; }
  // How the verdict names it: "host:1", or "host:1 (process 1)" when process is set.
  std::string name() const {
    return process < 0 ? device.str() : device.str() + " (process " + std::to_string(process) + ")";
  }
};

struct UseVerdict {
  enum class Finding {
    kNotMeasured,        // no step measured (or a strategy that does not measure yet)
    kAllUsed,            // every device busy; nothing below applies
    kInputBound,         // devices wait for their input: between steps, or its copy in
    kPipelineBubble,     // pipeline stages wait for their neighbours (more micro-batches)
    kUnbalanced,         // devices wait for a slower one at the gradient all-reduce
    kCommunicationBound  // every device waits for communication that backward did not hide
  };
  Finding finding = Finding::kNotMeasured;
  std::vector<DeviceUse> devices;
  double exposed_comm_share = 0;  // the least comm-wait share over the devices
  int slowest = -1;               // index into devices of the one the others wait for (2+)
  std::vector<int> named;         // indices into devices of those the sentence is about
  std::string sentence;           // the verdict, with the numbers that support it
  double pipeline_theory = -1;    // pipelines: the schedule's bubble, (p - 1) / (m + p - 1)
};

// The thresholds of the verdict: a device waiting this share of its steps for its input, for its
// pipeline neighbours, for a slower device, or for communication is a finding (checked in that
// order).
inline constexpr double kVerdictThreshold = 0.20;

// The verdict on measured devices (any order; their shares decide); a pipeline's stages pass
// their schedule's theoretical bubble.
UseVerdict judge_device_use(std::vector<DeviceUse> devices, double pipeline_theory = -1);
const char* finding_name(UseVerdict::Finding finding);  // "all_used", "input_bound", ...
// One line per device ("host:0  compute 93.1%  input 0.4%  comm wait 4.0%  idle 2.5%  (17
// steps, 21.4 ms per step)") then "verdict: <sentence>".
std::vector<std::string> use_verdict_lines(const UseVerdict& verdict);
// {"finding": ..., "sentence": ..., "exposed_comm_share": ..., "slowest": ..., "devices": [{
// "device", "replica", "process" (-1: one process), "steps", "window_ms", "input_ms",
// "compute_ms", "comm_wait_ms", "idle_ms", "bubble_ms"}, ...]}: as the next value of `json`, or as a document of its own.
void write_use_verdict(JsonWriter& json, const UseVerdict& verdict);
std::string use_verdict_json(const UseVerdict& verdict);

}  // namespace ls
