// Table and JSON of the scaling test (see scale_report.h).
#include "scale_report.h"

#include <cstdio>
#include <fstream>

#include <lockstep/error.h>
#include <lockstep/device_use.h>
#include <lockstep/json.h>

namespace {

// The CPU's model name from /proc/cpuinfo ("" when unknown).
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "";
}

}  // namespace

void compute_efficiency(std::vector<ScalePoint>& points) {
  // The base is the smallest run (fewest devices, then fewest processes): one device, unless
  // every run spans several processes (mpirun without --processes 1).
  const ScalePoint* base = nullptr;
  for (const ScalePoint& p : points) {
    if (base == nullptr || p.devices < base->devices ||
        (p.devices == base->devices && p.processes < base->processes)) {
      base = &p;
    }
  }
  LS_CHECK(base != nullptr && base->samples_per_s > 0, "scaling efficiency needs a finished run");
  const double per_device = base->samples_per_s / base->devices;
  for (ScalePoint& p : points) p.efficiency = p.samples_per_s / (p.devices * per_device);
}

std::string backend_name(ls::DeviceKind kind) {
  return "lockstep-" + std::string(ls::device_kind_name(kind));
}

void print_table(const ScaleOptions& o, const std::string& description,
                 const std::vector<ScalePoint>& points) {
  std::printf("\n%s scaling, %s, %s, %lld timed steps per run (median of %lld windows)\n",
              scale_mode_name(o.mode), description.c_str(), o.optimizer.c_str(),
              static_cast<long long>(o.steps - o.warmup), static_cast<long long>(o.windows));
  std::printf("%9s %7s %8s %12s %12s %12s %10s %9s %10s %10s %10s\n", "processes", "devices",
              "batch", "samples/s", "tokens/s", "per device", "efficiency", "step ms", "comm ms",
              "exposed ms", "final loss");
  for (const ScalePoint& p : points) {
    // A run that spans processes is marked with '*' (its collectives cross MPI).
    const std::string processes = std::to_string(p.processes) + (p.processes > 1 ? "*" : "");
    std::printf("%9s %7d %8lld %12.0f %12.0f %12.0f %10.3f %9.2f %10.2f %10.2f %10.4f\n",
                processes.c_str(), p.devices, static_cast<long long>(p.global_batch),
                p.samples_per_s, p.tokens_per_s, p.samples_per_s / p.devices, p.efficiency,
                p.step_ms_median, p.comm_total_ms, p.comm_exposed_ms, p.final_loss);
  }
  std::printf("\ndevice use (each device's own clock, steps after the first 3):\n");
  for (const ScalePoint& p : points) {
    std::printf("%d device(s):\n", p.devices);
    for (const std::string& line : ls::use_verdict_lines(p.use)) std::printf("%s\n", line.c_str());
  }
  if (!o.trace.path.empty()) {
    std::printf("traces of steps %lld-%lld: ", static_cast<long long>(o.trace.first_step),
                static_cast<long long>(o.trace.last_step));
    for (size_t i = 0; i < points.size(); ++i) {
      std::printf("%s%s", i > 0 ? ", " : "",
                  trace_path_for(o.trace.path, points[i].devices, points.size()).c_str());
    }
    std::printf(" (open them in ui.perfetto.dev)\n");
  }
  std::fflush(stdout);
}

void write_scale_json(const ScaleOptions& o, const Workload& work, ls::DeviceKind kind,
                      const std::vector<ScalePoint>& points, const std::string& path) {
  ls::JsonWriter json;
  json.begin_object();
  json.field("mode", std::string(scale_mode_name(o.mode)));
  json.field("model", o.model);
  json.field("description", work.description);
  if (work.transformer && o.model == "gpt") {  // the shape bench/peers/compare.py matches
    const ls::nn::TransformerConfig& c = *work.transformer;
    json.key("gpt").begin_object();
    json.field("layers", c.layers);
    json.field("hidden", c.hidden);
    json.field("heads", c.heads);
    json.field("seq", c.max_seq);
    json.field("vocab", c.vocab);
    json.field("dropout", static_cast<double>(c.dropout));
    json.end_object();
    // Model FLOPs per trained token (6 per weight + attention): MFU = tokens/s x this / peak.
    json.field("train_flops_per_token", c.train_flops_per_token(c.max_seq));
  }
  json.field("backend", backend_name(kind));
  json.field("device_kind", std::string(ls::device_kind_name(kind)));
  json.key("widths").begin_array();
  if (!points.empty()) {
    for (int64_t w : points.front().widths) json.value(w);
  }
  json.end_array();
  json.field("params", points.empty() ? int64_t{0} : points.front().params);
  json.field("optimizer", o.optimizer);
  json.field("lr", static_cast<double>(o.lr));
  json.field("seed", static_cast<int64_t>(o.seed));
  json.field("steps", o.steps);
  json.field("warmup", o.warmup);
  json.field("windows", o.windows);
  if (o.mode == ScaleMode::kWeak) {
    json.field("per_device_batch", o.per_device_batch);
  } else {
    json.field("global_batch", o.global_batch);
  }
  json.field("host_threads_per_device", o.host_threads);
  json.field("shard", ls::shard_mode_name(o.shard));
  json.field("recompute", ls::recompute_name(o.recompute));
  json.field("precision", ls::precision_name(o.precision));
  json.field("graphs", std::string(!o.graphs ? "auto" : *o.graphs ? "on" : "off"));
  json.key("machine").begin_object();
  json.field("cores", ls::host_core_count());
  json.field("cpu", cpu_model());
  json.field("gpus", ls::cuda_availability().device_count);
  json.end_object();
  json.key("runs").begin_array();
  for (const ScalePoint& p : points) {
    json.begin_object();
    json.field("devices", p.devices);
    json.field("processes", p.processes);
    json.field("device_list", ls::devices_str(p.device_list));
    json.field("global_batch", p.global_batch);
    json.field("samples_per_s", p.samples_per_s);
    if (p.tokens_per_s > 0) json.field("tokens_per_s", p.tokens_per_s);
    json.field("per_device_samples_per_s", p.samples_per_s / p.devices);
    json.field("efficiency", p.efficiency);
    json.field("step_ms_median", p.step_ms_median);
    json.field("comm_exposed_ms", p.comm_exposed_ms);
    json.field("comm_total_ms", p.comm_total_ms);
    json.field("final_loss", p.final_loss);
    json.field("buckets", p.buckets);
    json.field("graphs", p.graphs);
    json.key("window_samples_per_s").begin_array();
    for (double r : p.window_samples_per_s) json.value(r);
    json.end_array();
    json.field("wall_s", p.wall_s);
    json.field("parameter_bytes", p.state_bytes.parameters);
    json.field("gradient_bytes", p.state_bytes.gradients);
    json.field("optimizer_bytes", p.state_bytes.optimizer);
    json.field("peak_bytes", p.peak_bytes);
    json.key("device_use");
    ls::write_use_verdict(json, p.use);
    json.end_object();
  }
  json.end_array();
  json.end_object();
  json.write_file(path);
}
