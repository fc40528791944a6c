// lockstep-scale: the scaling test. Trains the same MLP on Fashion-MNIST on 1, 2, 4, ...
// devices of this machine, one DataParallel per device count, and reports throughput, scaling
// efficiency against one device, step time and exposed communication (table, JSON, PNG).
// Files: scale_options (flags, device counts), scale_run (one measured run), progress (the
// progress line), scale_report (table + JSON), scale_plot (runs plot_scale.py).
// Ctrl-C or SIGTERM ends the current run after its step and prints the finished runs' table.
// Under `mpirun -np P`, every run spans the P processes (each on its first N devices), or with
// --processes 1,P also process 0 alone; process 0 prints and writes the files.
// Exit codes: 0 success (a missing matplotlib is only a warning), 1 runtime failure, 2 usage,
// 130 / 143 stopped by SIGINT / SIGTERM.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <lockstep/device.h>
#include "engine/core/runtime.h"
#include <lockstep/data/dataset.h>
#include "programs/common/stop_signals.h"
#include <lockstep/world.h>
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
              scale_mode_name(o.mode), std::string(ls::device_kind_name(plan.kind())).c_str(),
              counts.c_str(), ls::host_core_count());
  if (o.mode == ScaleMode::kWeak) {
    std::printf("%lld examples per device per step", static_cast<long long>(o.per_device_batch));
  } else {
    std::printf("global batch %lld", static_cast<long long>(o.global_batch));
  }
  std::printf(", %lld steps (%lld warm-up, %lld timed windows)\n", static_cast<long long>(o.steps),
              static_cast<long long>(o.warmup), static_cast<long long>(o.windows));
  if (plan.kind() == ls::DeviceKind::kHost &&
      plan.counts.back() * o.host_threads > ls::host_core_count()) {
    std::printf(
        "lockstep-scale: warning: %d host device(s) x %d thread(s) is more than the %d "
        "cores; those runs share cores and do not measure scaling\n",
        plan.counts.back(), o.host_threads, ls::host_core_count());
  }
  std::fflush(stdout);
}

// The process counts to test under `world` (see --processes).
std::vector<int> process_counts(const ScaleOptions& o, const ls::World& world) {
  if (o.processes.empty()) return {world.size()};
  std::vector<int> counts = o.processes;
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  for (int p : counts) {
    if (p != 1 && p != world.size()) {
      throw UsageError("--processes " + std::to_string(p) + ": each count must be 1 (process 0 " +
                       "alone) or the " + std::to_string(world.size()) +
                       " processes mpirun started; start mpirun with -np " + std::to_string(p) +
                       " for that count");
    }
  }
  return counts;
}

// Process 0 alone on its first `n` devices while the others wait (bounded): the one-process
// points of --processes 1,P. Every process returns whether the run was stopped.
constexpr auto kAloneBound = std::chrono::hours(2);
std::optional<ScalePoint> run_alone(const ScaleOptions& o, const Workload& work,
                                    const DevicePlan& plan, int n, const ls::World& world,
                                    ProgressBar& progress, const StopSignals& stop) {
  std::optional<ScalePoint> point;
  if (world.rank() == 0) {
    point = run_scale_point(o, work, plan.first(n), nullptr, progress, stop);
  }
  const bool stopped = world.any_process(world.rank() == 0 && !point, kAloneBound);
  if (stopped) return std::nullopt;
  if (!point) point = ScalePoint{};  // the waiting processes' placeholder; they print nothing
  return point;
}

int run(const ScaleOptions& o, const DevicePlan& plan, const ls::WorldScope& world,
        const StopSignals& stop) {
  // Process 0 reports; the others' output would repeat it (their errors still go to stderr).
  if (world->rank() > 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
    std::fprintf(stderr, "lockstep-scale: process %d cannot silence its stdout\n", world->rank());
  }
  const std::vector<int> processes = process_counts(o, *world);
  print_plan(o, plan);
  if (world->size() > 1) {
    std::printf("lockstep-scale: %d processes (mpirun): device counts are per process\n",
                world->size());
    // Open MPI binds each process to one core by default (-np <= 2: --bind-to core), which
    // would make host devices of one process share that core.
    if (plan.kind() == ls::DeviceKind::kHost && ls::host_core_count() < plan.counts.back()) {
      std::printf(
          "lockstep-scale: note: this process may use %d core(s); mpirun binds processes to "
          "cores unless told otherwise: add --bind-to none (or --map-by ...:PE=N)\n",
          ls::host_core_count());
    }
  }
  WorkloadOptions w;
  w.model = o.model;
  w.data = o.data_dir;
  w.hidden = o.hidden;
  w.layers = o.layers;
  w.heads = o.heads;
  w.seq = o.seq;
  const Workload work = make_workload(w);
  std::printf("model: %s\n", work.description.c_str());

  ProgressBar progress(world->rank() == 0);
  std::vector<ScalePoint> points;
  for (int p : processes) {
    for (int n : plan.counts) {
      ScaleOptions run_options = o;  // each run traces into its own file
      if (!o.trace.path.empty()) {
        run_options.trace.path = trace_path_for(o.trace.path, n, plan.counts.size());
      }
      std::optional<ScalePoint> point;
      if (p == 1 && world->size() > 1) {
        point = run_alone(run_options, work, plan, n, *world, progress, stop);
      } else {
        const std::unique_ptr<ls::World> span =
            world->with_local_devices(plan.first(n));
        point = run_scale_point(run_options, work, plan.first(n),
                                world->size() > 1 ? span.get() : nullptr, progress, stop);
      }
      if (!point) {  // every replica thread of that run is joined by now
        progress.end("stopped");
        std::printf("stopped by %s during the %d-device run; no files written\n",
                    stop.signal_name(), n * p);
        if (!points.empty() && world->rank() == 0) {
          compute_efficiency(points);
          print_table(o, work.description, points);
        }
        return stop.exit_code();
      }
      points.push_back(std::move(*point));
    }
  }
  if (world->rank() > 0) return 0;  // process 0 reports and writes the files
  compute_efficiency(points);
  print_table(o, work.description, points);

  std::string json_path = o.json_path;
  const bool temporary_json = json_path.empty() && !o.plot_path.empty();
  if (temporary_json) {
    json_path = (std::filesystem::temp_directory_path() /
                 ("lockstep-scale-" + std::to_string(getpid()) + ".json"))
                    .string();
  }
  if (!json_path.empty()) write_scale_json(o, work, plan.kind(), points, json_path);
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
  std::variant<ScaleOptions, int> parsed = parse_scale_options(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const ScaleOptions& options = std::get<ScaleOptions>(parsed);
  std::optional<ls::WorldScope> world;
  // A process that fails must not leave the others waiting (MPI_Finalize waits for all).
  const auto end_job = [&](int code) {
    if (world && (*world)->size() > 1) ls::World::abort_job(code);
    return code;
  };
  try {
    const DevicePlan plan = resolve_device_counts(options);  // may throw UsageError
    ls::set_host_threads_per_device(options.host_threads);
    // Under mpirun this joins the other processes (each drives up to the largest count).
    world.emplace(plan.first(plan.counts.back()));
    return run(options, plan, *world, stop);
  } catch (const UsageError& e) {
    return end_job(ls::cli::usage_error("lockstep-scale", e.what()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-scale: error: %s\n", e.what());
    return end_job(ls::cli::exit_code_of(e));
  }
}
