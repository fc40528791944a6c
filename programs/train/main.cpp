// lockstep-train: trains a model (an MLP on Fashion-MNIST, a GPT on dict-gcide, a transformer
// classifier on WordNet supersenses; programs/common/workload.h) data-parallel over the given devices
// (ZeRO-1/2 with --shard), or with its layers cut into --pipeline stages (pipelines x data
// parallel when the devices are a multiple), and reports test loss, accuracy and throughput. It
// is also the example of embedding the engine: load data, make a DataParallel (or a Pipeline:
// the same calls), loop over batches, evaluate.
// Ctrl-C or SIGTERM stops it after the current step, with a checkpoint when it keeps them.
// Under `mpirun -np P`, each process drives its --devices and the replicas of every process
// train together (lockstep/world.h); process 0 prints, writes the JSON and exports, and every
// process stops after the same step when any of them got a signal.
// Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 / 143 stopped by SIGINT / SIGTERM.
#include <lockstep/lockstep.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <variant>

#include "programs/common/cli.h"
#include "programs/common/stop_signals.h"
#include "programs/common/traced_batches.h"
#include "programs/common/workload.h"
#include "programs/train/train_auto.h"
#include "programs/train/train_options.h"

namespace {

using ls::Trainer;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string format_eta(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

// The pipeline's bubble over a run: the mean of each step's measured bubble, and the theory.
struct BubbleTotals {
  double measured = 0, theory = 0;
  int64_t steps = 0;
  double mean() const { return steps > 0 ? measured / static_cast<double>(steps) : 0.0; }
};

struct RunSummary {
  std::string description;      // the model and data
  std::vector<int64_t> widths;  // the MLP's layer widths, input to output (mlp only)
  int64_t tokens_per_example = 0;
  int64_t params = 0;
  int64_t steps = 0;
  int64_t steps_run = 0;  // in this process (fewer than steps after --resume or a stop)
  bool stopped = false;   // by a signal, after step `last_step`
  int64_t last_step = 0;
  std::string last_checkpoint;  // the one written when stopped, if any
  int64_t skipped_steps = 0;  // non-finite loss or gradients: the optimizer did not step
  double final_loss = 0;  // mean loss over the last (up to) 100 steps
  double train_seconds = 0;
  ls::EvalResult test;
  std::optional<BubbleTotals> bubble;  // pipeline runs
  bool graphs = false;                 // steps could run as graphs
  ls::UseVerdict use;                  // how each device spent the steps
};

std::chrono::milliseconds collective_timeout(const TrainOptions& o) {
  return std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
}

// Heartbeat and telemetry: the same for every strategy.
ls::MonitorOptions monitor_options(const TrainOptions& o) {
  ls::MonitorOptions options;
  options.heartbeat_interval =
      std::chrono::milliseconds(static_cast<int64_t>(o.heartbeat_s * 1000));
  options.telemetry_path = o.telemetry_path;
  options.flight_recorder_dir = o.flight_dir;
  options.trace = o.trace;
  options.telemetry_interval = std::chrono::milliseconds(
      std::max<int64_t>(1, static_cast<int64_t>(o.telemetry_interval_s * 1000)));
  options.heartbeat = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  return options;
}

ls::DataParallelOptions data_parallel_options(const TrainOptions& o) {
  ls::DataParallelOptions options;
  static_cast<ls::MonitorOptions&>(options) = monitor_options(o);
  options.seed = o.seed;
  options.accumulate = static_cast<int>(o.accumulate);
  options.shard = o.shard;
  options.recompute = o.recompute;
  options.allow_uneven_shards = o.uneven_shards;
  options.buckets.cap_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
  options.buckets.reduce_dtype = o.grad_reduce;
  options.precision = o.precision;
  options.graphs = o.graphs;
  options.timeout = collective_timeout(o);
  return options;
}

ls::PipelineOptions pipeline_options(const TrainOptions& o) {
  LS_CHECK(o.accumulate == 1 && o.shard == ls::ShardMode::kNone && !o.uneven_shards,
           "--pipeline does not combine with --accumulate, --shard or --uneven-shards; use "
           "--micro-batches instead of --accumulate");
  LS_CHECK(o.precision == ls::Precision::kF32 && o.grad_reduce == ls::DType::kF32,
           "--pipeline runs in f32 only: drop --precision and --grad-reduce (pipelines have no "
           "mixed precision yet)");
  ls::PipelineOptions options;
  static_cast<ls::MonitorOptions&>(options) = monitor_options(o);
  options.stages = static_cast<int>(o.pipeline);
  options.micro_batches = static_cast<int>(o.micro_batches);
  options.schedule = ls::parse_schedule(o.schedule);
  options.recompute = o.recompute;
  options.seed = o.seed;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  return options;
}

// Pipelines report how much of each step their stages waited (the bubble).
void observe_step(const Trainer& trainer, RunSummary& s) {
  const ls::StepStats stats = trainer.step_stats();
  if (!stats.bubble) return;
  if (!s.bubble) s.bubble = BubbleTotals{};
  s.bubble->measured += *stats.bubble;
  s.bubble->theory = stats.theoretical_bubble.value_or(0.0);
  ++s.bubble->steps;
}

// With --resume and a checkpoint in --checkpoint-dir: restores the trainer and the data position
// from it. Returns the first step to run.
int64_t resume_if_asked(const TrainOptions& o, Trainer& trainer, ls::data::Prefetcher& batches) {
  if (!o.resume) return 1;
  // Every process decides alike: one that loads while another starts fresh would pair
  // different collectives. Each reads the directory itself, so all must see the same one.
  const ls::World& world = ls::World::current();
  const bool found = ls::latest_checkpoint(o.checkpoint_dir).has_value();
  LS_CHECK_AS(ls::ErrorKind::kIo, world.any_process(found) == !world.any_process(!found),
              "--resume: some processes see a checkpoint in ", o.checkpoint_dir,
              " and some do not; every process reads it, so --checkpoint-dir must be on a file "
              "system all of them see");
  if (!found) {
    std::printf("no checkpoint in %s yet: starting from step 1\n", o.checkpoint_dir.c_str());
    return 1;
  }
  const ls::TrainingPosition position = trainer.load(o.checkpoint_dir);
  batches.seek(position.epoch, position.batch_index);
  std::printf("resumed from %s at step %lld\n", o.checkpoint_dir.c_str(),
              static_cast<long long>(trainer.steps_taken()));
  return trainer.steps_taken() + 1;
}

// The mean of the last (up to) 100 losses of steps that were not skipped.
class RecentLoss {
 public:
  void add(float loss) {
    losses_.push_back(loss);
    if (losses_.size() > 100) losses_.pop_front();
  }
  double mean() const {
    if (losses_.empty()) return std::numeric_limits<double>::quiet_NaN();
    return std::accumulate(losses_.begin(), losses_.end(), 0.0) /
           static_cast<double>(losses_.size());
  }

 private:
  std::deque<float> losses_;
};

ls::CheckpointRetention retention(const TrainOptions& o) {
  return {static_cast<int>(o.keep_checkpoints), o.keep_every};
}

// Steps first_step..total_steps, logging and checkpointing as the options say. A stop signal
// ends it between two steps; returns the last step taken. Each step's result is handled (loss,
// skip, log line) once the next step is queued.
int64_t train_steps(const TrainOptions& o, Trainer& trainer, ls::data::Prefetcher& batches,
                    int64_t first_step, int64_t total_steps, RecentLoss& recent,
                    RunSummary& summary, const StopSignals& stop) {
  ls::data::Batch batch;
  const Clock::time_point start = Clock::now();
  struct Pending {
    int64_t step = 0;    // lockstep-train's count (0: none pending)
    int64_t number = 0;  // the trainer's
    int64_t epoch = 0;
  } pending;
  const auto handle_pending = [&] {
    if (pending.step == 0) return;
    const ls::StepResult result = trainer.result(pending.number);
    const int64_t step = pending.step;
    pending.step = 0;
    observe_step(trainer, summary);
    if (result.skipped) {
      std::printf("step %lld skipped: non-finite loss or gradients (%lld skipped so far)\n",
                  static_cast<long long>(step), static_cast<long long>(trainer.skipped_steps()));
    } else {
      recent.add(result.loss);
    }
    if (o.log_every > 0 && (step % o.log_every == 0 || step == total_steps)) {
      const double elapsed = seconds_since(start);
      const double rate = static_cast<double>((step - first_step + 1) * o.batch) / elapsed;
      std::printf(
          "step %lld/%lld  epoch %lld  loss %.4f  %.0f examples/s  ETA %s\n",
          static_cast<long long>(step), static_cast<long long>(total_steps),
          static_cast<long long>(pending.epoch + 1), static_cast<double>(result.loss), rate,
          format_eta(elapsed / static_cast<double>(step) * static_cast<double>(total_steps - step))
              .c_str());
      std::fflush(stdout);
    }
  };
  for (int64_t step = first_step; step <= total_steps; ++step) {
    // Every process must stop after the same step (each step is collective).
    // A process that is gone fails this within the collective timeout, like a step would.
    if (ls::World::current().any_process(stop.stop_requested(), collective_timeout(o))) {
      handle_pending();
      return step - 1;
    }
    ls::programs::next_batch(batches, batch, trainer);
    // Queued without waiting for the devices where the strategy allows (data parallel): the
    // result is read one step later, so the host prepares step k+1 while the devices run step k.
    const int64_t number = trainer.step_async(batch);
    handle_pending();
    pending = {step, number, batches.epoch()};
    const bool checkpoint_due = o.checkpoint_every > 0 && step % o.checkpoint_every == 0;
    if (!o.checkpoint_dir.empty() && (checkpoint_due || step == total_steps)) {
      handle_pending();  // the checkpoint holds this step: report it first
      const std::string path =
          trainer.save(o.checkpoint_dir, {batches.epoch(), batches.position()}, retention(o));
      std::printf("checkpoint: %s\n", path.c_str());
    }
  }
  handle_pending();
  return total_steps;
}

WorkloadOptions workload_options(const TrainOptions& o) {
  WorkloadOptions w;
  w.model = o.model;
  w.data = o.data_dir;
  w.hidden = o.hidden;
  w.layers = o.layers;
  w.heads = o.heads;
  w.seq = o.seq;
  w.dropout = o.dropout;
  w.layout = o.layout;
  w.pooling = o.pooling;
  w.init = o.init;
  w.tokenizer = o.tokenizer;
  w.max_examples = o.max_examples;
  w.eval_examples = o.eval_examples;
  return w;
}

// Writes the model's parameters as a Hugging Face checkpoint (--export-hf).
void export_hf(const TrainOptions& o, const ls::nn::TransformerConfig& config, Trainer& trainer) {
  ls::checkpoint::HostTensors weights;
  for (ls::NamedParameter& p : trainer.model_parameters()) {
    weights[p.name] = {std::move(p.shape), std::move(p.values)};
  }
  ls::checkpoint::write_hf(o.export_hf, config, weights);
  std::printf("exported the model in Hugging Face form to %s\n", o.export_hf.c_str());
}

RunSummary train_with(const TrainOptions& o, const std::vector<ls::Device>& devices,
                      const Workload& work, Trainer& trainer, const StopSignals& stop) {
  const ls::data::Dataset& train = work.train;
  const ls::data::Dataset& test = work.test;
  ls::data::Sampler sampler(train.count, o.seed);
  // Batches are gathered on a background thread, two steps ahead, so a step never waits for data.
  ls::data::Prefetcher batches(train, sampler, o.batch, /*drop_last=*/true,
                               ls::programs::traced_prefetch(trainer));
  LS_CHECK(batches.batches_per_epoch() > 0, "--batch ", o.batch, " is larger than the ",
           train.count, " training examples; use a smaller batch");
  const int64_t total_steps = o.steps > 0 ? o.steps : o.epochs * batches.batches_per_epoch();
  const int64_t first_step = resume_if_asked(o, trainer, batches);
  const ls::World& world = ls::World::current();
  const std::string where = world.size() == 1
                                ? ls::devices_str(devices)
                                : std::to_string(world.replicas()) + " devices in " +
                                      std::to_string(world.size()) +
                                      " processes (process 0: " + ls::devices_str(devices) + ")";
  std::printf(
      "training %s (%lld parameters) on %s: %lld steps of global batch %lld, %s lr %g,"
      " %s\n",
      work.description.c_str(), static_cast<long long>(trainer.parameter_count()), where.c_str(),
      static_cast<long long>(total_steps), static_cast<long long>(o.batch), o.optimizer.c_str(),
      static_cast<double>(o.lr), trainer.layout().c_str());

  RecentLoss recent;
  RunSummary summary;
  const Clock::time_point start = Clock::now();
  const int64_t last_step =
      train_steps(o, trainer, batches, first_step, total_steps, recent, summary, stop);
  summary.stopped = last_step < total_steps;
  summary.last_step = last_step;
  const bool saved_last = o.checkpoint_every > 0 && last_step % o.checkpoint_every == 0;
  if (summary.stopped && !o.checkpoint_dir.empty() && last_step >= first_step && !saved_last) {
    summary.last_checkpoint =
        trainer.save(o.checkpoint_dir, {batches.epoch(), batches.position()}, retention(o));
  } else if (summary.stopped && !o.checkpoint_dir.empty() && (o.resume || saved_last)) {
    // Nothing new since the checkpoint this run resumed from, or its last periodic one.
    summary.last_checkpoint = ls::latest_checkpoint(o.checkpoint_dir).value_or("");
  }
  summary.description = work.description;
  summary.widths = work.mlp_widths;
  summary.tokens_per_example = work.tokens_per_example;
  summary.params = trainer.parameter_count();
  summary.train_seconds = seconds_since(start);
  summary.steps = total_steps;
  summary.steps_run = last_step - first_step + 1;
  summary.skipped_steps = trainer.skipped_steps();
  summary.graphs = trainer.graphs();
  summary.final_loss = recent.mean();
  summary.use = trainer.device_use_all_processes();  // every process calls it: a collective
  if (!summary.stopped) summary.test = trainer.evaluate(test, work.transformer ? 64 : 1000);
  const bool lead = ls::World::current().rank() == 0;  // writes the files
  if (!summary.stopped && !o.export_hf.empty() && lead) export_hf(o, *work.transformer, trainer);
  return summary;
}

RunSummary run(const TrainOptions& o, const std::vector<ls::Device>& devices,
               const StopSignals& stop) {
  const Workload work = make_workload(workload_options(o));
  for (const std::string& note : work.notes) std::printf("note: %s\n", note.c_str());
  const ls::OptimizerFactory optimizer =
      ls::make_optimizer_factory({o.optimizer, o.lr, o.momentum, o.weight_decay});
  // The trainer's threads are joined when it goes out of scope, before the summary is printed.
  const ls::World& world = ls::World::current();
  // Under ZeRO-3 across processes no process holds every parameter: the export would fail only
  // after training (DataParallel::parameters refuses it), so it is refused before.
  LS_CHECK_AS(ls::ErrorKind::kUsage,
              o.shard != ls::ShardMode::kParameters || world.size() == 1 || o.export_hf.empty(),
              "--export-hf with --shard parameters across processes: no process holds every "
              "parameter to write; use --shard gradients, or one process");
  std::unique_ptr<Trainer> trainer;
  if (o.pipeline > 0) {  // under mpirun: whole pipelines in every process
    trainer = std::make_unique<ls::Pipeline>(world, work.model, optimizer, pipeline_options(o));
  } else {
    trainer = std::make_unique<ls::DataParallel>(world, work.model, optimizer,
                                                 data_parallel_options(o));
  }
  return train_with(o, devices, work, *trainer, stop);
}

void write_json(const TrainOptions& o, const std::vector<ls::Device>& devices, const RunSummary& s,
                double wall_s) {
  ls::JsonWriter json;
  json.begin_object();
  json.key("devices").begin_array();  // this process's
  for (const ls::Device& d : devices) json.value(d.str());
  json.end_array();
  json.field("processes", static_cast<int64_t>(ls::World::current().size()));
  json.field("replicas", static_cast<int64_t>(ls::World::current().replicas()));
  json.field("backend", std::string(ls::device_kind_name(devices[0].kind)));
  json.field("model", o.model);
  json.field("description", s.description);
  if (!s.widths.empty()) {
    json.key("widths").begin_array();
    for (int64_t w : s.widths) json.value(w);
    json.end_array();
  }
  json.field("params", s.params);
  json.field("optimizer", o.optimizer);
  json.field("lr", static_cast<double>(o.lr));
  json.field("seed", static_cast<int64_t>(o.seed));
  json.field("steps", s.steps);
  json.field("skipped_steps", s.skipped_steps);
  json.field("global_batch", o.batch);
  json.field("accumulate", o.accumulate);
  json.field("precision", std::string(ls::precision_name(o.precision)));
  json.field("grad_reduce", std::string(ls::dtype_name(o.grad_reduce)));
  json.field("graphs", s.graphs);
  json.field("shard", ls::shard_mode_name(o.shard));
  json.field("recompute", ls::recompute_name(o.recompute));
  if (s.bubble) {
    json.field("pipeline_stages", o.pipeline);
    json.field("schedule", o.schedule);
    json.field("micro_batches", o.micro_batches);
    json.field("bubble_measured", s.bubble->mean());
    json.field("bubble_theory", s.bubble->theory);
  }
  json.field("final_loss", s.final_loss);
  json.field("test_loss", s.test.loss);
  json.field("test_accuracy", s.test.accuracy);
  if (o.model == "gpt") json.field("test_perplexity", std::exp(s.test.loss));
  json.field("samples_per_s", static_cast<double>(s.steps_run * o.batch) / s.train_seconds);
  if (s.tokens_per_example > 0) {
    json.field("tokens_per_s",
               static_cast<double>(s.steps_run * o.batch * s.tokens_per_example) / s.train_seconds);
  }
  json.field("train_s", s.train_seconds);
  json.field("wall_s", wall_s);
  json.key("device_use");
  ls::write_use_verdict(json, s.use);
  json.end_object();
  json.write_file(o.json_path);
}

}  // namespace

// Prints how the run ended after a stop signal; returns the exit code.
int report_stop(const TrainOptions& o, const RunSummary& s, const StopSignals& stop) {
  std::printf("stopped by %s after step %lld of %lld", stop.signal_name(),
              static_cast<long long>(s.last_step), static_cast<long long>(s.steps));
  if (!s.last_checkpoint.empty()) {
    std::printf("; checkpoint %s; continue with the same flags and --resume\n",
                s.last_checkpoint.c_str());
  } else if (o.checkpoint_dir.empty()) {
    std::printf(" (no --checkpoint-dir: nothing saved)\n");
  } else {
    std::printf(" (no step taken: nothing to save)\n");
  }
  return stop.exit_code();
}

int main(int argc, char** argv) {
  const StopSignals stop;  // first: every thread started later inherits its signal mask
  std::variant<TrainOptions, int> parsed = parse_train_options(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  TrainOptions& options = std::get<TrainOptions>(parsed);
  ls::set_host_threads_per_device(options.host_threads);  // before any host device exists
  const std::optional<std::vector<ls::Device>> listed =
      ls::cli::devices_or_usage_error("lockstep-train", options.devices);
  if (!listed) return ls::cli::kUsageExit;
  const std::vector<ls::Device>& devices = *listed;
  const Clock::time_point start = Clock::now();
  std::optional<ls::WorldScope> world;
  try {
    // Under mpirun this joins the other processes (MPI); otherwise a world of one process.
    world.emplace(devices);
    // Process 0 reports; the others' output would repeat it (their errors still go to stderr).
    if ((*world)->rank() > 0 && std::freopen("/dev/null", "w", stdout) == nullptr) {
      std::fprintf(stderr, "lockstep-train: process %d cannot silence its stdout\n",
                   (*world)->rank());
    }
    if (options.strategy == "auto") {
      LS_CHECK((*world)->size() == 1,
               "--strategy auto plans for one process; under mpirun "
               "choose --shard yourself");
      apply_auto_strategy(options, workload_options(options), devices);
    }
    RunSummary summary = run(options, devices, stop);
    if (summary.stopped) return report_stop(options, summary, stop);
    const double wall_s = seconds_since(start);
    const double examples_per_s =
        static_cast<double>(summary.steps_run * options.batch) / summary.train_seconds;
    std::printf("done: %lld steps, final loss %.4f, test loss %.4f, test accuracy %.4f",
                static_cast<long long>(summary.steps), summary.final_loss, summary.test.loss,
                summary.test.accuracy);
    if (options.model == "gpt") std::printf(", test perplexity %.2f", std::exp(summary.test.loss));
    std::printf(", %.0f examples/s", examples_per_s);
    if (summary.tokens_per_example > 0) {
      std::printf(" (%.0f tokens/s)",
                  examples_per_s * static_cast<double>(summary.tokens_per_example));
    }
    if (summary.bubble) {
      std::printf(", bubble %.3f measured, %.3f theory", summary.bubble->mean(),
                  summary.bubble->theory);
    }
    std::printf(", %.1f s\n", wall_s);
    if ((*world)->rank() == 0) {
      std::printf("device use over the measured steps (each device's own clock):\n");
      for (const std::string& line : ls::use_verdict_lines(summary.use)) {
        std::printf("%s\n", line.c_str());
      }
    }
    if (!options.trace.path.empty() && (*world)->rank() == 0) {
      if (std::filesystem::exists(options.trace.path)) {
        std::printf("trace of steps %lld-%lld written to %s (open it in ui.perfetto.dev)\n",
                    static_cast<long long>(options.trace.first_step),
                    static_cast<long long>(std::min(options.trace.last_step, summary.steps)),
                    options.trace.path.c_str());
      } else {
        std::printf("no trace written: the run's %lld steps do not reach --trace-steps %lld:%lld\n",
                    static_cast<long long>(summary.steps),
                    static_cast<long long>(options.trace.first_step),
                    static_cast<long long>(options.trace.last_step));
      }
    }
    if (!options.json_path.empty() && (*world)->rank() == 0) {
      write_json(options, devices, summary, wall_s);
      std::printf("results written to %s\n", options.json_path.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-train: error: %s\n", e.what());
    // The other processes must not wait for this one (MPI_Finalize waits for every process).
    const int exit_code = ls::cli::exit_code_of(e);
    if (world && (*world)->size() > 1) ls::World::abort_job(exit_code);
    return exit_code;
  }
  return 0;
}
