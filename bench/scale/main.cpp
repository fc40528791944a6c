// lockstep-scale: the scaling test. Trains the same MLP on Fashion-MNIST on 1, 2, 4, ...
// devices of this machine, one DataParallel per device count, and reports throughput, scaling
// efficiency against one device, step time and exposed communication (table, JSON, PNG).
// Files: scale_options (flags, device counts), scale_run (one measured run), progress (the
// progress line), scale_report (table + JSON), scale_plot (runs plot_scale.py).
// Ctrl-C or SIGTERM ends the current run after its step and prints the finished runs' table.
// Exit codes: 0 success (a missing matplotlib is only a warning), 1 runtime failure, 2 usage,
// 130 / 143 stopped by SIGINT / SIGTERM.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/runtime.h"
#include "engine/model/data/dataset.h"
#include "examples/stop_signals.h"
#include "progress.h"
#include "scale_options.h"
#include "scale_plot.h"
#include "scale_report.h"
#include "scale_run.h"

namespace {

void print_plan(const ScaleOptions& o, const DevicePlan& plan) {
  std::string counts;
  for (int n : plan.counts) {
    if (!counts.empty()) counts += ',';
    counts += std::to_string(n);
  }
  std::printf("lockstep-scale: %s scaling on %s device counts %s (%d cores), ",
              scale_mode_name(o.mode), std::string(ls::device_kind_name(plan.kind)).c_str(),
              counts.c_str(), ls::host_core_count());
  if (o.mode == ScaleMode::kWeak) {
    std::printf("%lld examples per device per step", static_cast<long long>(o.per_device_batch));
  } else {
    std::printf("global batch %lld", static_cast<long long>(o.global_batch));
  }
  std::printf(", %lld steps (%lld warm-up, %lld timed windows)\n", static_cast<long long>(o.steps),
              static_cast<long long>(o.warmup), static_cast<long long>(o.windows));
  if (plan.kind == ls::DeviceKind::kHost &&
      plan.counts.back() * o.host_threads > ls::host_core_count()) {
    std::printf(
        "lockstep-scale: warning: %d host device(s) x %d thread(s) is more than the %d "
        "cores; those runs share cores and do not measure scaling\n",
        plan.counts.back(), o.host_threads, ls::host_core_count());
  }
  std::fflush(stdout);
}

int run(const ScaleOptions& o, const StopSignals& stop) {
  const DevicePlan plan = resolve_device_counts(o);  // may throw UsageError
  ls::set_host_threads_per_device(o.host_threads);
  print_plan(o, plan);
  WorkloadOptions w;
  w.model = o.model;
  w.data = o.data_dir;
  w.hidden = o.hidden;
  w.layers = o.layers;
  w.heads = o.heads;
  w.seq = o.seq;
  const Workload work = make_workload(w);
  std::printf("model: %s\n", work.description.c_str());

  ProgressBar progress;
  std::vector<ScalePoint> points;
  for (int n : plan.counts) {
    std::optional<ScalePoint> point =
        run_scale_point(o, work, first_devices(plan.kind, n), progress, stop);
    if (!point) {  // every replica thread of that run is joined by now
      progress.end("stopped");
      std::printf("stopped by %s during the %d-device run; no files written\n", stop.signal_name(),
                  n);
      if (!points.empty()) {
        compute_efficiency(points);
        print_table(o, work.description, points);
      }
      return stop.exit_code();
    }
    points.push_back(std::move(*point));
  }
  compute_efficiency(points);
  print_table(o, work.description, points);

  std::string json_path = o.json_path;
  const bool temporary_json = json_path.empty() && !o.plot_path.empty();
  if (temporary_json) {
    json_path = (std::filesystem::temp_directory_path() /
                 ("lockstep-scale-" + std::to_string(getpid()) + ".json"))
                    .string();
  }
  if (!json_path.empty()) write_scale_json(o, work, plan.kind, points, json_path);
  if (!o.json_path.empty()) std::printf("results written to %s\n", o.json_path.c_str());
  if (!o.plot_path.empty() && draw_scale_plot(json_path, o.plot_path, !temporary_json)) {
    std::printf("plot written to %s\n", o.plot_path.c_str());
  }
  if (temporary_json) std::filesystem::remove(json_path);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const StopSignals stop;  // first: every thread started later inherits its signal mask
  ScaleOptions options;
  try {
    options = parse_scale_options(argc, argv);
    if (options.help) {
      std::printf("%s", scale_usage());
      return 0;
    }
    return run(options, stop);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "lockstep-scale: %s\n\n%s", e.what(), scale_usage());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-scale: error: %s\n", e.what());
    return 1;
  }
}
