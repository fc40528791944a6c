// The flags lockstep-train, lockstep-scale and lockstep-plan share, each declared here once: its
// name, help, default and check. A program adds the groups it uses to its CLI11 app and binds
// them to its options (which derive from the structs below), so a flag means the same in every
// program. Flags only one program has are declared in that program's options file.
#pragma once

#include <CLI/CLI.hpp>
#include <lockstep/lockstep.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ls::cli {

// --devices SPEC: the devices to use, one replica each (parse_devices: host:N, cuda, cuda:I,J,
// auto). Checked against the machine after parsing (devices_of).
CLI::Option* add_devices(CLI::App& app, std::string& spec);

// --model NAME, one of `models` (a subset of mlp, gpt, classifier, bag-of-bytes).
CLI::Option* add_model(CLI::App& app, std::string& model, const std::vector<std::string>& models);
// --data PATH: the model's data set (default: its Debian package's files).
CLI::Option* add_data(CLI::App& app, std::string& path);

// --hidden, --layers, --heads, --seq.
struct ModelShapeFlags {
  std::vector<int64_t> hidden;  // empty: the program's default (mlp widths, transformer hidden)
  int64_t layers = 4;           // transformers
  int64_t heads = 4;
  int64_t seq = 128;
};
void add_model_shape(CLI::App& app, ModelShapeFlags& flags, const std::string& hidden_default);

// --optimizer, --lr, --momentum, --weight-decay, --seed.
struct OptimizerFlags {
  std::string optimizer = "adamw";
  float lr = 1e-3f;
  float momentum = 0.0f;
  float weight_decay = 0.01f;
  uint64_t seed = 1;
};
void add_optimizer(CLI::App& app, OptimizerFlags& flags);
// --optimizer and --momentum alone (lockstep-plan needs no learning rate).
void add_optimizer_kind(CLI::App& app, OptimizerFlags& flags);

// --bucket-mb alone (lockstep-plan) or with the rest of the data-parallel flags.
CLI::Option* add_bucket_mb(CLI::App& app, double& mib);

// --bucket-mb, --shard, --recompute, --precision, --graphs / --no-graphs, --host-threads.
struct DataParallelFlags {
  double bucket_mb = 25.0;
  bool choose_buckets = true;  // --bucket-mb not given: --strategy auto may choose the cap
  ShardMode shard = ShardMode::kNone;
  Recompute recompute = Recompute::kNone;
  Precision precision = Precision::kF32;
  std::optional<bool> graphs;  // unset: DataParallelOptions::graphs' default
  int host_threads = 1;
};
void add_data_parallel(CLI::App& app, DataParallelFlags& flags);

// --schedule, --micro-batches: how a pipeline runs (lockstep-train --pipeline, lockstep-plan).
struct PipelineScheduleFlags {
  std::string schedule = "1f1b";
  int64_t micro_batches = 4;
};
void add_pipeline_schedule(CLI::App& app, PipelineScheduleFlags& flags);

// --device-memory-gb X: memory per device for the planner (0: host devices' MemAvailable).
CLI::Option* add_device_memory(CLI::App& app, double& gb);

// --json PATH: the program's results as JSON.
CLI::Option* add_json(CLI::App& app, std::string& path);

// --trace FILE and --trace-steps FIRST:LAST (1-based, inclusive): a Chrome trace of those steps
// (lockstep/trainer.h's TraceOptions), bound to `trace`.
void add_trace(CLI::App& app, TraceOptions& trace);

}  // namespace ls::cli
