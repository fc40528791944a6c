// Command-line options of lockstep-scale: its own flags beside the shared ones of
// programs/common/flags.h, and the device counts to test.
//
// --devices means what it means in lockstep-train (the devices, e.g. host:4, cuda, cuda:0,2;
// default auto: every GPU, else one host device per core); --counts says how many of them, from
// the first, each run uses (default 1, 2, 4, ... up to all of them, and all of them).
// parse_scale_options returns the exit code instead when the program should stop there (after
// --help, or a usage error it printed); resolve_device_counts throws UsageError for counts the
// test cannot use (no 1-device baseline, more devices than given, a strong-scaling global batch
// that does not divide by a count).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "programs/common/cli.h"
#include "programs/common/flags.h"

using UsageError = ls::cli::UsageError;

enum class ScaleMode { kWeak, kStrong };
const char* scale_mode_name(ScaleMode mode);

struct ScaleOptions : ls::cli::ModelShapeFlags, ls::cli::OptimizerFlags, ls::cli::DataParallelFlags {
  std::string devices = "auto";
  std::vector<int> counts;    // empty: 1, 2, 4, ... up to the number of devices, and that number
  std::string data_dir;       // empty: the model's installed data set (programs/common/workload.h)
  std::string model = "gpt";  // gpt | classifier | mlp
  ScaleMode mode = ScaleMode::kWeak;
  // 0 below: the model's default, set by parse_scale_options (see --help).
  int64_t per_device_batch = 0;  // weak scaling
  int64_t global_batch = 0;      // strong scaling
  int64_t steps = 0;             // per device count, warm-up included
  int64_t warmup = 0;            // untimed steps at the start of each run
  int64_t windows = 5;           // the timed steps are split into this many windows
  // Under mpirun: the process counts to test, each 1 or the job's process count (empty: the
  // job's count only). A 1-process run is process 0 alone; the others wait for it.
  std::vector<int> processes;
  std::string json_path;
  std::string plot_path;
  // --trace FILE: a Chrome trace of each device count's run (FILE-<N>dev.json when several);
  // --trace-steps defaults to the first timed steps (at most 5).
  ls::TraceOptions trace;
};

// The trace file of the run on `devices` devices (one of `counts` counts).
std::string trace_path_for(const std::string& path, int devices, size_t counts);

// The options, or the exit code to return at once (0 after --help, 2 after a usage error).
std::variant<ScaleOptions, int> parse_scale_options(int argc, char** argv);

// The devices --devices names and the counts of them to test, ascending.
struct DevicePlan {
  std::vector<ls::Device> devices;
  std::vector<int> counts;

  ls::DeviceKind kind() const { return devices.front().kind; }
  // The first `count` devices: the ones a run of that count uses.
  std::vector<ls::Device> first(int count) const;
};
DevicePlan resolve_device_counts(const ScaleOptions& options);

// Global batch of a run on `devices` devices.
int64_t global_batch_for(const ScaleOptions& options, int devices);
