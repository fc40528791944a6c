// The measured training run of one device count (see scale_run.h).
#include "scale_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <limits>
#include <numeric>

#include <lockstep/data/prefetch.h>
#include <lockstep/data/sampler.h>
#include <lockstep/data_parallel.h>
#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include "programs/common/traced_batches.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Per-step numbers from replica 0's timeline of the step just taken.
struct CommTimes {
  double exposed_ms = 0;  // comm work after backward ended
  double total_ms = 0;    // all-reduce time summed over buckets
};

CommTimes comm_times(const ls::BucketTimeline& t) {
  CommTimes c;
  if (t.bucket_end_ms.empty()) return c;
  const double last_end = *std::max_element(t.bucket_end_ms.begin(), t.bucket_end_ms.end());
  c.exposed_ms = std::max(0.0, last_end - t.backward_end_ms);
  for (size_t b = 0; b < t.bucket_end_ms.size(); ++b)
    c.total_ms += t.bucket_end_ms[b] - t.bucket_start_ms[b];
  return c;
}

std::string format_rate(double samples_per_s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f samples/s", samples_per_s);
  return buf;
}

}  // namespace

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::optional<ScalePoint> run_scale_point(const ScaleOptions& o, const Workload& work,
                                          const std::vector<ls::Device>& devices,
                                          const ls::World* world, ProgressBar& progress,
                                          const StopSignals& stop) {
  const Clock::time_point run_start = Clock::now();
  ScalePoint point;
  point.processes = world != nullptr ? world->size() : 1;
  point.devices = world != nullptr ? world->replicas() : static_cast<int>(devices.size());
  point.device_list = devices;
  point.global_batch = global_batch_for(o, point.devices);

  const ls::data::Dataset& train = work.train;
  // Each run's peak is its own: the devices' allocators outlive runs in one process.
  for (const ls::Device& d : devices) ls::device_runtime(d).allocator().reset_peak();
  ls::DataParallelOptions options;
  options.seed = o.seed;
  options.buckets.cap_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
  options.shard = o.shard;
  options.recompute = o.recompute;
  options.precision = o.precision;
  options.graphs = o.graphs;
  options.trace = o.trace;
  const ls::OptimizerFactory optimizer =
      ls::make_optimizer_factory({o.optimizer, o.lr, o.momentum, o.weight_decay});
  ls::DataParallel trainer = world != nullptr
                                 ? ls::DataParallel(*world, work.model, optimizer, options)
                                 : ls::DataParallel(devices, work.model, optimizer, options);
  // Across processes every process must stop after the same step.
  const auto stop_now = [&] {
    return world != nullptr ? world->any_process(stop.stop_requested()) : stop.stop_requested();
  };
  point.widths = work.mlp_widths;
  point.params = trainer.parameter_count();
  point.graphs = trainer.graphs();
  point.buckets = static_cast<int64_t>(trainer.buckets().size());
  point.state_bytes = trainer.state_bytes(0);

  ls::data::Sampler sampler(train.count, o.seed);
  ls::data::Prefetcher batches(train, sampler, point.global_batch, /*drop_last=*/true,
                               ls::programs::traced_prefetch(trainer));
  LS_CHECK(batches.batches_per_epoch() > 0, "global batch ", point.global_batch,
           " is larger than the ", train.count, " training examples; use a smaller batch");
  ls::data::Batch batch;
  std::deque<double> recent_losses;
  auto record_loss = [&](float loss) {
    recent_losses.push_back(static_cast<double>(loss));
    if (recent_losses.size() > 10) recent_losses.pop_front();
  };

  char label[64];
  if (point.processes > 1) {
    std::snprintf(label, sizeof label, "%s x%d (%d processes)",
                  std::string(ls::device_kind_name(devices[0].kind)).c_str(), point.devices,
                  point.processes);
  } else {
    std::snprintf(label, sizeof label, "%s x%d",
                  std::string(ls::device_kind_name(devices[0].kind)).c_str(), point.devices);
  }
  progress.begin(label, o.steps);
  for (int64_t step = 1; step <= o.warmup; ++step) {
    if (stop_now()) return std::nullopt;
    ls::programs::next_batch(batches, batch, trainer);
    record_loss(trainer.step(batch).loss);
    progress.update(step, "warm-up", step == o.warmup);
  }

  const int64_t timed = o.steps - o.warmup;
  std::vector<double> step_ms, exposed_ms, comm_ms;
  int64_t done = o.warmup;
  for (int64_t w = 0; w < o.windows; ++w) {
    const int64_t window_steps = timed * (w + 1) / o.windows - timed * w / o.windows;
    double window_ms = 0;
    for (int64_t s = 0; s < window_steps; ++s) {
      if (stop_now()) return std::nullopt;  // not timed: the agreement is the harness's
      const Clock::time_point t0 = Clock::now();
      ls::programs::next_batch(batches, batch, trainer);
      const float loss = trainer.step(batch).loss;
      const double ms = ms_between(t0, Clock::now());
      window_ms += ms;
      step_ms.push_back(ms);
      record_loss(loss);
      // A CUDA graph records no bucket timeline (DataParallel::last_timeline): no comm columns.
      if (devices[0].is_host() || !trainer.graphs()) {
        const CommTimes c = comm_times(trainer.last_timeline(0));  // not timed
        exposed_ms.push_back(c.exposed_ms);
        comm_ms.push_back(c.total_ms);
      }
      ++done;
      const std::string status =
          "window " + std::to_string(w + 1) + "/" + std::to_string(o.windows);
      progress.update(done, status, s + 1 == window_steps);
    }
    point.window_samples_per_s.push_back(static_cast<double>(window_steps * point.global_batch) /
                                         (window_ms / 1000.0));
  }
  point.samples_per_s = median(point.window_samples_per_s);
  point.tokens_per_s = point.samples_per_s * static_cast<double>(work.tokens_per_example);
  point.step_ms_median = median(step_ms);
  const double unmeasured = std::numeric_limits<double>::quiet_NaN();
  point.comm_exposed_ms = exposed_ms.empty() ? unmeasured : median(exposed_ms);
  point.comm_total_ms = comm_ms.empty() ? unmeasured : median(comm_ms);
  point.final_loss = std::accumulate(recent_losses.begin(), recent_losses.end(), 0.0) /
                     static_cast<double>(recent_losses.size());
  point.wall_s = ms_between(run_start, Clock::now()) / 1000.0;
  point.peak_bytes = trainer.allocator_stats(0).peak_bytes_in_use;
  point.use = trainer.device_use_all_processes();  // every process calls it: a collective
  progress.end(format_rate(point.samples_per_s));
  return point;
}
