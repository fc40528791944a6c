#include "scale_options.h"

#include <algorithm>
#include <string_view>

namespace {

constexpr const char* kDescription =
    "Scaling test: trains the same model on 1, 2, 4, ... devices of this machine (by default a "
    "GPT on dict-gcide's English text) and reports throughput, scaling efficiency against one "
    "device, step time and exposed communication per device count, as a table, JSON and (with "
    "--plot) a PNG.";

// 1, 2, 4, ... below `top`, then `top` itself.
std::vector<int> powers_of_two_up_to(int top) {
  std::vector<int> counts;
  for (int n = 1; n < top; n *= 2) counts.push_back(n);
  counts.push_back(top);
  return counts;
}

void add_scale_flags(CLI::App& app, ScaleOptions& o) {
  app.add_option("--counts", o.counts,
                 "how many of the devices each run uses, from the first: 1,2,4 runs on the first "
                 "1, 2 and 4 (default: 1, 2, 4, ... up to all of them, and all of them). Must "
                 "contain 1, the baseline of the efficiency. Under `mpirun -np P` the counts are "
                 "per process: every run spans the P processes (P x N devices)")
      ->type_name("N[,N...]")->delimiter(',')->check(ls::cli::positive())->group("Parallelism");
  app.add_option("--processes", o.processes,
                 "under mpirun: the process counts to test, each 1 (process 0 alone, the others "
                 "wait) or P, e.g. --processes 1,2 with mpirun -np 2 compares 2 devices in one "
                 "process with 1 device in each of 2 (default: P)")
      ->type_name("N[,N...]")->delimiter(',')->check(ls::cli::positive())->group("Parallelism");
  const auto group = "Scaling";
  app.add_option_function<std::string>(
         "--mode", [&o](const std::string& v) { o.mode = v == "strong" ? ScaleMode::kStrong : ScaleMode::kWeak; },
         "weak (default): fixed batch per device, global batch grows with the count; strong: "
         "fixed global batch split across the devices")
      ->type_name("weak|strong")->check(ls::cli::one_of({"weak", "strong"}, "mode"))->group(group);
  app.add_option("--per-device-batch", o.per_device_batch,
                     "weak scaling: examples per device per step (default: transformers 8, mlp "
                     "128)")
          ->check(ls::cli::positive())->group(group);
  app.add_option("--global-batch", o.global_batch,
                     "strong scaling: examples per step, must divide by every count (default: "
                     "transformers 32, mlp 1024)")
          ->check(ls::cli::positive())->group(group);
  app.add_option("--steps", o.steps,
                 "steps per device count, warm-up included (default: transformers 30, mlp 100)")
      ->check(ls::cli::positive())->group(group);
  app.add_option("--warmup", o.warmup,
                 "untimed steps at the start of each run (default: transformers 5, mlp 10)")
      ->check(ls::cli::non_negative())->group(group);
  app.add_option("--windows", o.windows,
                 "the timed steps are split into N windows; throughput is the median over the "
                 "windows")
      ->capture_default_str()->check(ls::cli::positive())->group(group);
  app.add_option("--plot", o.plot_path,
                 "draw throughput and efficiency vs device count into PATH (PNG) with "
                 "bench/scale/plot_scale.py (needs python3 + matplotlib: apt-get install "
                 "python3-matplotlib); a missing one is a warning")
      ->type_name("PATH")->group("Output");
}

// The flags that only make sense together (or apart), checked after parsing.
void check_combination(const CLI::App& app, const ScaleOptions& o) {
  if (app.count("--trace-steps") > 0 && o.trace.path.empty())
    throw UsageError("--trace-steps needs --trace FILE");
  if (o.mode == ScaleMode::kWeak && app.count("--global-batch") > 0)
    throw UsageError("--global-batch is for --mode strong; weak scaling takes --per-device-batch");
  if (o.mode == ScaleMode::kStrong && app.count("--per-device-batch") > 0)
    throw UsageError("--per-device-batch is for --mode weak; strong scaling takes --global-batch");
  if (o.model != "mlp" && o.hidden.size() > 1)
    throw UsageError("--hidden takes one width (the hidden size) for --model " + o.model);
  if (o.steps - o.warmup < o.windows) {
    throw UsageError("--steps " + std::to_string(o.steps) + " leaves " +
                     std::to_string(std::max<int64_t>(0, o.steps - o.warmup)) +
                     " timed step(s) after --warmup " + std::to_string(o.warmup) +
                     ", fewer than the " + std::to_string(o.windows) +
                     " --windows; every window needs at least one step");
  }
}

// The defaults that depend on the model; `warmup_given`: --warmup 0 stays 0.
void apply_model_defaults(ScaleOptions& o, bool warmup_given) {
  const bool transformer = o.model != "mlp";
  if (o.hidden.empty() && !transformer) o.hidden = {1024, 1024};
  if (o.per_device_batch == 0) o.per_device_batch = transformer ? 8 : 128;
  if (o.global_batch == 0) o.global_batch = transformer ? 32 : 1024;
  if (o.steps == 0) o.steps = transformer ? 30 : 100;
  if (!warmup_given) o.warmup = transformer ? 5 : 10;
}

}  // namespace

const char* scale_mode_name(ScaleMode mode) { return mode == ScaleMode::kWeak ? "weak" : "strong"; }

std::variant<ScaleOptions, int> parse_scale_options(int argc, char** argv) {
  ScaleOptions o;
  CLI::App app(kDescription, "lockstep-scale");
  app.footer(
      "Ctrl-C or SIGTERM ends the current run after its step and prints the finished runs' "
      "table.\nExit codes: 0 success, 1 runtime failure, 2 usage error, 130 / 143 stopped by "
      "SIGINT / SIGTERM.");
  ls::cli::add_model(app, o.model, {"gpt", "classifier", "mlp"});
  ls::cli::add_data(app, o.data_dir);
  ls::cli::add_model_shape(app, o, "default: transformers 256; mlp 1024,1024");
  ls::cli::add_optimizer(app, o);
  ls::cli::add_devices(app, o.devices);
  ls::cli::add_data_parallel(app, o);
  add_scale_flags(app, o);
  ls::cli::add_json(app, o.json_path);
  ls::cli::add_trace(app, o.trace);
  if (const std::optional<int> exit_code = ls::cli::parse(app, argc, argv)) return *exit_code;
  apply_model_defaults(o, app.count("--warmup") > 0);
  if (app.count("--trace-steps") == 0) {  // the first timed steps
    o.trace.first_step = o.warmup + 1;
    o.trace.last_step = std::min(o.steps, o.warmup + 5);
  }
  try {
    check_combination(app, o);
  } catch (const UsageError& e) {
    return ls::cli::usage_error(app, e.what());
  }
  return o;
}

std::vector<ls::Device> DevicePlan::first(int count) const {
  return {devices.begin(), devices.begin() + count};
}

DevicePlan resolve_device_counts(const ScaleOptions& o) {
  const std::string_view spec = o.devices;
  if (spec.starts_with("host:") && spec.find(',') != std::string_view::npos) {
    throw UsageError("--devices " + std::string(spec) +
                     ": --devices names devices, as in lockstep-train; the counts to test have "
                     "their own flag: --devices host:N --counts " + std::string(spec.substr(5)));
  }
  DevicePlan plan;
  plan.devices = ls::cli::devices_of("--devices", spec);
  const int available = static_cast<int>(plan.devices.size());
  plan.counts = o.counts.empty() ? powers_of_two_up_to(available) : o.counts;
  std::sort(plan.counts.begin(), plan.counts.end());
  if (std::adjacent_find(plan.counts.begin(), plan.counts.end()) != plan.counts.end())
    throw UsageError("--counts lists a device count twice");
  if (plan.counts.front() != 1) {
    throw UsageError("--counts has no 1-device run; scaling efficiency is measured against one "
                     "device, so the list must contain 1");
  }
  if (plan.counts.back() > available) {
    throw UsageError("--counts asks for " + std::to_string(plan.counts.back()) +
                     " devices; --devices " + std::string(spec) + " gives " +
                     std::to_string(available) + " (" + ls::devices_str(plan.devices) + ")");
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
  return plan;
}

int64_t global_batch_for(const ScaleOptions& o, int devices) {
  return o.mode == ScaleMode::kWeak ? o.per_device_batch * devices : o.global_batch;
}

std::string trace_path_for(const std::string& path, int devices, size_t counts) {
  if (counts <= 1) return path;
  const std::string tag = "-" + std::to_string(devices) + "dev";
  const size_t dot = path.rfind('.');
  const size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + tag;
  return path.substr(0, dot) + tag + path.substr(dot);
}
