// Parser for lockstep-scale's flags and the expansion of --devices into device counts (see
// scale_options.h). Every flag but --help takes one value: `--flag value` or `--flag=value`.
#include "scale_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <string_view>

#include "engine/core/error.h"

namespace {

using ls::cli::parse_number;
using ls::cli::parse_positive;

template <typename T>
std::vector<T> parse_list(std::string_view flag, std::string_view text) {
  return ls::cli::parse_positive_list<T>(flag, text);
}

// 1, 2, 4, ... below `top`, then `top` itself.
std::vector<int> powers_of_two_up_to(int top) {
  std::vector<int> counts;
  for (int n = 1; n < top; n *= 2) counts.push_back(n);
  counts.push_back(top);
  return counts;
}

int usable_gpus(std::string_view spec) {
  ls::CudaAvailability cuda = ls::cuda_availability();
  if (cuda.device_count == 0) {
    throw UsageError("--devices " + std::string(spec) + " asks for GPUs but none is usable: " +
                     cuda.reason_unavailable + ". Use --devices host:1,2 to scale over CPU cores.");
  }
  return cuda.device_count;
}

}  // namespace

const char* scale_mode_name(ScaleMode mode) { return mode == ScaleMode::kWeak ? "weak" : "strong"; }

const char* scale_usage() {
  return R"(usage: lockstep-scale [options]
Scaling test: trains the same model on 1, 2, 4, ... devices of this machine (by default a
GPT on dict-gcide's English text) and reports throughput, scaling efficiency against one
device, step time and exposed communication per device count, as a table, JSON and (with
--plot) a PNG.

  --devices LIST        the device COUNTS to test (unlike lockstep-train, where host:N is one
                        list of N devices): host:1,2 runs on 1 then 2 host devices, cuda:1,2,4,8
                        on the first 1, 2, 4, 8 GPUs. auto (default): 1,2,4,... up to every GPU,
                        else host counts 1,2,4,... up to the core count plus the core count;
                        host / cuda: the same for that kind. The list must contain 1 (the
                        baseline of the efficiency). Under `mpirun -np P` the counts are per
                        process: every run spans the P processes (P x N devices).
  --processes LIST      under mpirun: the process counts to test, each 1 (process 0 alone, the
                        others wait) or P, e.g. --processes 1,2 with mpirun -np 2 compares
                        2 devices in one process with 1 device in each of 2 (default: P)
  --model NAME          gpt (default): a GPT-2-layout language model on dict-gcide;
                        classifier: a transformer + 4-way head on WordNet glosses;
                        mlp: an MLP on Fashion-MNIST
  --data PATH           the model's data (default: its Debian package's files, see
                        lockstep-train --help)
  --hidden W[,W...]     transformers: hidden size (default 256); mlp: hidden widths
                        (default 1024,1024: 784-1024-1024-10)
  --layers N, --heads N, --seq N
                        transformer blocks, heads, tokens per example (default 4, 4, 128)
  --mode weak|strong    weak (default): fixed batch per device, global batch grows with the
                        count; strong: fixed global batch split across the devices
  --per-device-batch N  weak scaling: examples per device per step (default: transformers 8,
                        mlp 128)
  --global-batch N      strong scaling: examples per step, must divide by every count
                        (default: transformers 32, mlp 1024)
  --steps N             steps per device count, warm-up included (default: transformers 30,
                        mlp 100)
  --warmup N            untimed steps at the start of each run (default: transformers 5,
                        mlp 10)
  --windows N           the timed steps are split into N windows; throughput is the median over
                        the windows (default 5)
  --optimizer NAME      adamw (default) or sgd
  --lr X                learning rate (default 1e-3)
  --momentum X          SGD momentum (default 0)
  --weight-decay X      AdamW decoupled weight decay / SGD L2 (default 0.01)
  --seed N              seed for initialisation and shuffling (default 1)
  --host-threads N      cores per host device (default 1)
  --bucket-mb X         gradient bucket cap in MiB (default 25; the first bucket is 1 MiB)
  --shard MODE          none (default), optimizer (ZeRO-1: optimizer state split across
                        the devices) or gradients (ZeRO-2: summed gradients split too)
  --precision P         f32 (default), bf16 or f16 matrix-product operands (f32 accumulation)
  --no-graphs           run every step eagerly (default: steps run as graphs after warm-up,
                        but not on several GPUs of one process, docs/gpu.md; on GPUs the
                        bucket timeline, and so the comm columns, need eager steps)
  --graphs              run steps as graphs on several GPUs of one process too
  --json PATH           write the results as JSON
  --plot PATH           draw throughput and efficiency vs device count into PATH (PNG) with
                        bench/scale/plot_scale.py (needs python3 + matplotlib:
                        apt-get install python3-matplotlib); a missing one is a warning
  -h, --help            show this help

Exit codes: 0 success, 1 runtime failure, 2 usage error.
)";
}

namespace {
// The flags that only make sense together (or apart), checked after parsing.
void check_combination(const ScaleOptions& o, bool per_device_set, bool global_set) {
  if (o.mode == ScaleMode::kWeak && global_set) {
    throw UsageError("--global-batch is for --mode strong; weak scaling takes --per-device-batch");
  }
  if (o.mode == ScaleMode::kStrong && per_device_set) {
    throw UsageError("--per-device-batch is for --mode weak; strong scaling takes --global-batch");
  }
  if (o.steps - o.warmup < o.windows) {
    throw UsageError("--steps " + std::to_string(o.steps) + " leaves " +
                     std::to_string(std::max<int64_t>(0, o.steps - o.warmup)) +
                     " timed step(s) after --warmup " + std::to_string(o.warmup) +
                     ", fewer than the " + std::to_string(o.windows) +
                     " --windows; every window needs at least one step");
  }
}
}  // namespace

ScaleOptions parse_scale_options(int argc, char** argv) {
  ScaleOptions o;
  bool per_device_set = false, global_set = false, warmup_set = false;
  using Setter = ls::cli::FlagSetter;
  const std::map<std::string_view, Setter> setters = {
      {"--devices", [&](auto, auto v) { o.devices = v; }},
      {"--processes", [&](auto name, auto v) { o.processes = parse_list<int>(name, v); }},
      {"--data", [&](auto, auto v) { o.data_dir = v; }},
      {"--model",
       [&](auto f, auto v) {
         if (v != "mlp" && v != "gpt" && v != "classifier")
           throw UsageError(std::string(f) + ": unknown model '" + std::string(v) +
                            "'; available: gpt, classifier, mlp");
         o.model = v;
       }},
      {"--hidden", [&](auto f, auto v) { o.hidden = parse_list<int64_t>(f, v); }},
      {"--layers", [&](auto f, auto v) { o.layers = parse_positive<int64_t>(f, v); }},
      {"--heads", [&](auto f, auto v) { o.heads = parse_positive<int64_t>(f, v); }},
      {"--seq", [&](auto f, auto v) { o.seq = parse_positive<int64_t>(f, v); }},
      {"--mode",
       [&](auto f, auto v) {
         if (v == "weak")
           o.mode = ScaleMode::kWeak;
         else if (v == "strong")
           o.mode = ScaleMode::kStrong;
         else
           throw UsageError(std::string(f) + ": unknown mode '" + std::string(v) +
                            "'; use weak or strong");
       }},
      {"--per-device-batch",
       [&](auto f, auto v) {
         o.per_device_batch = parse_positive<int64_t>(f, v);
         per_device_set = true;
       }},
      {"--global-batch",
       [&](auto f, auto v) {
         o.global_batch = parse_positive<int64_t>(f, v);
         global_set = true;
       }},
      {"--steps", [&](auto f, auto v) { o.steps = parse_positive<int64_t>(f, v); }},
      {"--warmup",
       [&](auto f, auto v) {
         o.warmup = parse_number<int64_t>(f, v);
         warmup_set = true;
         if (o.warmup < 0) throw UsageError("--warmup must be >= 0, got " + std::string(v));
       }},
      {"--windows", [&](auto f, auto v) { o.windows = parse_positive<int64_t>(f, v); }},
      {"--optimizer",
       [&](auto f, auto v) {
         if (v != "adamw" && v != "sgd")
           throw UsageError(std::string(f) + ": unknown optimizer '" + std::string(v) +
                            "'; use adamw or sgd");
         o.optimizer = v;
       }},
      {"--lr", [&](auto f, auto v) { o.lr = parse_positive<float>(f, v); }},
      {"--momentum",
       [&](auto f, auto v) {
         o.momentum = parse_number<float>(f, v);
         if (o.momentum < 0 || o.momentum >= 1) throw UsageError("--momentum must be in [0, 1)");
       }},
      {"--weight-decay",
       [&](auto f, auto v) {
         o.weight_decay = parse_number<float>(f, v);
         if (o.weight_decay < 0) throw UsageError("--weight-decay must be >= 0");
       }},
      {"--seed", [&](auto f, auto v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--host-threads", [&](auto f, auto v) { o.host_threads = parse_positive<int>(f, v); }},
      {"--shard", [&](auto f, auto v) { o.shard = ls::cli::parse_shard_mode(f, v); }},
      {"--precision", [&](auto f, auto v) { o.precision = ls::cli::parse_precision_flag(f, v); }},
      {"--bucket-mb", [&](auto f, auto v) { o.bucket_mb = parse_positive<double>(f, v); }},
      {"--json", [&](auto, auto v) { o.json_path = v; }},
      {"--plot", [&](auto, auto v) { o.plot_path = v; }},
  };
  ls::cli::parse_flags(argc, argv, setters,
                       {{"-h", [&] { o.help = true; }},
                        {"--help", [&] { o.help = true; }},
                        {"--no-graphs", [&] { o.graphs = false; }},
                        {"--graphs", [&] { o.graphs = true; }}});
  const bool transformer = o.model != "mlp";
  if (o.hidden.empty() && !transformer) o.hidden = {1024, 1024};
  if (transformer && o.hidden.size() > 1) {
    throw UsageError("--hidden takes one width (the hidden size) for --model " + o.model);
  }
  if (o.per_device_batch == 0) o.per_device_batch = transformer ? 8 : 128;
  if (o.global_batch == 0) o.global_batch = transformer ? 32 : 1024;
  if (o.steps == 0) o.steps = transformer ? 30 : 100;
  if (o.warmup == 0 && !warmup_set) o.warmup = transformer ? 5 : 10;
  check_combination(o, per_device_set, global_set);
  return o;
}


DevicePlan resolve_device_counts(const ScaleOptions& o) {
  const std::string_view spec = o.devices;
  DevicePlan plan;
  if (spec == "auto" || spec == "host" || spec == "cuda") {
    const bool gpus =
        spec == "cuda" || (spec == "auto" && ls::cuda_availability().device_count > 0);
    plan.kind = gpus ? ls::DeviceKind::kCuda : ls::DeviceKind::kHost;
    plan.counts = powers_of_two_up_to(gpus ? usable_gpus(spec) : ls::host_core_count());
  } else if (spec.starts_with("host:") || spec.starts_with("cuda:")) {
    plan.kind = spec.starts_with("host:") ? ls::DeviceKind::kHost : ls::DeviceKind::kCuda;
    plan.counts = parse_list<int>("--devices", spec.substr(5));
    std::sort(plan.counts.begin(), plan.counts.end());
    if (std::adjacent_find(plan.counts.begin(), plan.counts.end()) != plan.counts.end()) {
      throw UsageError("--devices " + std::string(spec) + " lists a device count twice");
    }
  } else {
    throw UsageError("--devices: unknown spec '" + std::string(spec) +
                     "'; use auto, host, cuda, host:1,2,... or cuda:1,2,... (device counts)");
  }
  if (plan.counts.front() != 1) {
    throw UsageError("--devices " + std::string(spec) +
                     " has no 1-device run; scaling efficiency is measured against one device, "
                     "so the list must contain 1 (e.g. " +
                     std::string(spec.substr(0, 5)) + "1," + std::string(spec.substr(5)) + ")");
  }
  if (o.mode == ScaleMode::kStrong) {
    for (int n : plan.counts) {
      if (o.global_batch % n != 0) {
        throw UsageError("--mode strong: --global-batch " + std::to_string(o.global_batch) +
                         " does not divide by " + std::to_string(n) +
                         " devices; pick a global batch that is a multiple of every device count");
      }
    }
  }
  if (plan.kind == ls::DeviceKind::kCuda) {
    const int gpus = usable_gpus(spec);
    if (plan.counts.back() > gpus) {
      throw UsageError("--devices " + std::string(spec) + " asks for " +
                       std::to_string(plan.counts.back()) + " GPUs; this machine has " +
                       std::to_string(gpus));
    }
  }
  return plan;
}

std::vector<ls::Device> first_devices(ls::DeviceKind kind, int count) {
  std::vector<ls::Device> devices;
  for (int i = 0; i < count; ++i) devices.push_back({kind, i});
  return devices;
}

int64_t global_batch_for(const ScaleOptions& o, int devices) {
  return o.mode == ScaleMode::kWeak ? o.per_device_batch * devices : o.global_batch;
}
