// lockstep-train --pipeline (see examples/train_pipeline.h). Not here yet, compared with the
// data-parallel path: checkpoints, --resume, evaluation on the test set and --export-hf.
#include "examples/train_pipeline.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "examples/workload.h"

namespace {

using Clock = std::chrono::steady_clock;

void refuse_unsupported(const TrainOptions& o) {
  const bool unsupported = !o.checkpoint_dir.empty() || o.resume || !o.export_hf.empty() ||
                           o.accumulate != 1 || o.shard != ls::ShardMode::kNone || o.uneven_shards;
  LS_CHECK(!unsupported,
           "--pipeline does not support --checkpoint-dir, --resume, --export-hf, --accumulate, "
           "--shard or --uneven-shards yet; use --micro-batches instead of --accumulate");
}

struct BubbleSums {
  double measured = 0, theory = 0, step_ms = 0;
  int64_t steps = 0;
};

void write_json(const TrainOptions& o, const std::vector<ls::Device>& devices,
                const ls::Pipeline& pipe, const Workload& work, double final_loss, double train_s,
                int64_t steps, const BubbleSums& bubble) {
  ls::JsonWriter json;
  json.begin_object();
  json.key("devices").begin_array();
  for (const ls::Device& d : devices) json.value(d.str());
  json.end_array();
  json.field("model", o.model);
  json.field("description", work.description);
  json.field("params", pipe.parameter_count());
  json.field("pipeline_stages", static_cast<int64_t>(pipe.stages()));
  json.field("pipelines", static_cast<int64_t>(pipe.pipelines()));
  json.field("schedule", o.schedule);
  json.field("micro_batches", o.micro_batches);
  json.field("global_batch", o.batch);
  json.field("steps", steps);
  json.field("final_loss", final_loss);
  const double examples_per_s = static_cast<double>(steps * o.batch) / train_s;
  json.field("samples_per_s", examples_per_s);
  json.field("tokens_per_s",
             examples_per_s * static_cast<double>(std::max<int64_t>(1, work.tokens_per_example)));
  json.field("mean_step_ms", bubble.step_ms / static_cast<double>(bubble.steps));
  json.field("bubble_measured", bubble.measured / static_cast<double>(bubble.steps));
  json.field("bubble_theory", bubble.theory);
  json.field("train_s", train_s);
  json.end_object();
  json.write_file(o.json_path);
}

}  // namespace

int train_pipeline(const TrainOptions& o, const std::vector<ls::Device>& devices,
                   const StopSignals& stop) {
  refuse_unsupported(o);
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
  const Workload work = make_workload(w);
  ls::PipelineOptions options;
  options.stages = static_cast<int>(o.pipeline);
  options.micro_batches = static_cast<int>(o.micro_batches);
  options.schedule = ls::parse_schedule(o.schedule);
  options.seed = o.seed;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  ls::Pipeline pipe(devices, work.model,
                    ls::make_optimizer_factory({o.optimizer, o.lr, o.momentum, o.weight_decay}),
                    options);
  ls::data::Sampler sampler(work.train.count, o.seed);
  ls::data::Prefetcher batches(work.train, sampler, o.batch);
  LS_CHECK(batches.batches_per_epoch() > 0, "--batch ", o.batch, " is larger than the ",
           work.train.count, " training examples; use a smaller batch");
  const int64_t total = o.steps > 0 ? o.steps : o.epochs * batches.batches_per_epoch();
  std::printf(
      "training %s (%lld parameters) on %s: pipeline of %d stages x %d, %s, %lld "
      "micro-batches, %lld steps of global batch %lld\n",
      work.description.c_str(), static_cast<long long>(pipe.parameter_count()),
      ls::devices_str(devices).c_str(), pipe.stages(), pipe.pipelines(), o.schedule.c_str(),
      static_cast<long long>(o.micro_batches), static_cast<long long>(total),
      static_cast<long long>(o.batch));
  ls::data::Batch batch;
  BubbleSums bubble;
  double loss_sum = 0;
  int64_t losses = 0, steps = 0;
  const Clock::time_point start = Clock::now();
  for (int64_t step = 1; step <= total && !stop.stop_requested(); ++step, ++steps) {
    if (!batches.next(batch)) batches.next(batch);
    const ls::StepResult result = pipe.step(batch);
    const ls::PipelineStepStats stats = pipe.last_step_stats();
    bubble.measured += stats.mean_bubble;
    bubble.theory = stats.theoretical_bubble;
    bubble.step_ms += stats.step_ms;
    ++bubble.steps;
    if (!result.skipped && total - step < 100) {
      loss_sum += result.loss;
      ++losses;
    }
    if (o.log_every > 0 && (step % o.log_every == 0 || step == total)) {
      std::printf("step %lld/%lld  loss %.4f  bubble %.3f (theory %.3f)\n",
                  static_cast<long long>(step), static_cast<long long>(total),
                  static_cast<double>(result.loss), stats.mean_bubble, stats.theoretical_bubble);
      std::fflush(stdout);
    }
  }
  if (stop.stop_requested()) return stop.exit_code();
  const double train_s = std::chrono::duration<double>(Clock::now() - start).count();
  const double final_loss = losses > 0 ? loss_sum / static_cast<double>(losses) : NAN;
  std::printf(
      "done: %lld steps, final loss %.4f, %.0f examples/s, bubble %.3f measured, %.3f "
      "theory\n",
      static_cast<long long>(steps), final_loss, static_cast<double>(steps * o.batch) / train_s,
      bubble.measured / static_cast<double>(std::max<int64_t>(1, bubble.steps)), bubble.theory);
  if (!o.json_path.empty()) {
    write_json(o, devices, pipe, work, final_loss, train_s, steps, bubble);
    std::printf("results written to %s\n", o.json_path.c_str());
  }
  return 0;
}
