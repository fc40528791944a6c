// Command-line options of lockstep-scale and their parser.
//
// --devices names device COUNTS, not one device list: host:1,2 runs the test on 1 then 2 host
// devices, cuda:1,2,4 on the first 1, 2, 4 GPUs; auto picks 1,2,4,... up to every GPU, else
// host counts 1,2,4,... up to the core count plus the core count itself.
// parse_scale_options throws UsageError (exit code 2) for unknown flags and bad values;
// resolve_device_counts throws UsageError for lists the test cannot use (no 1-device baseline,
// a strong-scaling global batch that does not divide by a count, more GPUs than the machine has).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "examples/cli_values.h"

using UsageError = ls::cli::UsageError;

enum class ScaleMode { kWeak, kStrong };
const char* scale_mode_name(ScaleMode mode);

struct ScaleOptions {
  std::string devices = "auto";  // "auto", "host", "cuda", "host:1,2,4", "cuda:1,2"
  std::string data_dir;          // empty: the model's installed data set (examples/workload.h)
  std::string model = "gpt";     // gpt | classifier | mlp
  std::vector<int64_t> hidden;   // empty: mlp 1024,1024; transformers 256
  int64_t layers = 4;            // transformers
  int64_t heads = 4;
  int64_t seq = 128;
  ScaleMode mode = ScaleMode::kWeak;
  // 0 below: the model's default, set by parse_scale_options (see scale_usage()).
  int64_t per_device_batch = 0;    // weak scaling
  int64_t global_batch = 0;        // strong scaling
  int64_t steps = 0;               // per device count, warm-up included
  int64_t warmup = 0;              // untimed steps at the start of each run
  int64_t windows = 5;             // the timed steps are split into this many windows
  std::string optimizer = "adamw";
  float lr = 1e-3f;
  float momentum = 0.0f;
  float weight_decay = 0.01f;
  uint64_t seed = 1;
  int host_threads = 1;
  double bucket_mb = 25.0;
  ls::ShardMode shard = ls::ShardMode::kNone;  // --shard none | optimizer | gradients
  ls::Precision precision = ls::Precision::kF32;  // --precision f32 | bf16 | f16
  std::optional<bool> graphs;  // --graphs / --no-graphs; unset: DataParallelOptions::graphs
  // Under mpirun: the process counts to test, each 1 or the job's process count (empty: the
  // job's count only). A 1-process run is process 0 alone; the others wait for it.
  std::vector<int> processes;
  std::string json_path;
  std::string plot_path;
  bool help = false;
};

ScaleOptions parse_scale_options(int argc, char** argv);
const char* scale_usage();

// The device counts to test, ascending, and which kind of device: checks the list against the
// machine and the mode. An `auto`/`host`/`cuda` spec is expanded here.
struct DevicePlan {
  ls::DeviceKind kind = ls::DeviceKind::kHost;
  std::vector<int> counts;
};
DevicePlan resolve_device_counts(const ScaleOptions& options);

// The first `count` devices of the plan's kind: host:0..count-1 or cuda:0..count-1.
std::vector<ls::Device> first_devices(ls::DeviceKind kind, int count);

// Global batch of a run on `devices` devices.
int64_t global_batch_for(const ScaleOptions& options, int devices);
