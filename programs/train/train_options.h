// Command-line options of lockstep-train: its own flags beside the shared ones of
// programs/common/flags.h, and the checks of flags that do not combine (every one a usage error,
// exit 2). parse_train_options returns the exit code instead when the program should stop there
// (after --help, or a usage error it printed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "programs/common/flags.h"

struct TrainOptions : ls::cli::ModelShapeFlags,
                      ls::cli::OptimizerFlags,
                      ls::cli::DataParallelFlags,
                      ls::cli::PipelineScheduleFlags {
  std::string devices = "host:1";
  std::string data_dir;  // empty: the model's installed data set (programs/common/workload.h)
  std::string model = "mlp";
  float dropout = 0.0f;
  std::string layout = "gpt2";  // classifier: gpt2 | bert
  std::string pooling;          // classifier: last | first | mean
  std::string init;             // Hugging Face model directory to start from
  std::string tokenizer;        // GPT-2 BPE vocabulary directory (vocab.json, merges.txt)
  std::string export_hf;        // write the trained model in Hugging Face form here
  int64_t max_examples = 0;
  int64_t eval_examples = 0;  // 0: the model's default (gpt 512, others the whole test set)
  int64_t epochs = 0;         // 0: the model's default (mlp 8, classifier 3; gpt trains --steps)
  int64_t steps = 0;  // > 0: train this many steps instead of whole epochs (gpt default 300)
  int64_t batch = 0;  // global, split across the devices; 0: mlp 128, transformers 32
  int64_t accumulate = 1;
  bool uneven_shards = false;
  int64_t pipeline = 0;  // > 0: pipeline parallelism with this many stages
  ls::DType grad_reduce = ls::DType::kF32;  // --grad-reduce f32 | bf16
  std::string strategy = "manual";  // auto: the planner sets shard / pipeline (train_auto.h)
  double device_memory_gb = 0;      // --strategy auto; 0: host MemAvailable / devices
  double collective_timeout_s = 600;
  double heartbeat_s = 30;
  std::string telemetry_path;  // empty: no telemetry
  double telemetry_interval_s = 1;
  std::string flight_dir;  // where a hang or desync writes its flight recorder (empty: temp dir)
  ls::TraceOptions trace;  // --trace, --trace-steps
  int64_t log_every = 100;
  std::string json_path;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps; 0: only at the end (when checkpoint_dir is set)
  int64_t keep_checkpoints = 3;  // the newest N checkpoints stay; 0: all
  int64_t keep_every = 0;        // > 0: also every checkpoint whose step is a multiple of it
  bool resume = false;
};

// The options, or the exit code to return at once (0 after --help, 2 after a usage error).
std::variant<TrainOptions, int> parse_train_options(int argc, char** argv);
