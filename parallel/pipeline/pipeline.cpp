// Pipeline (see lockstep/pipeline.h): building the stages, its stall detector for the runtime
// that runs a job on every stage (parallel/engine/worker_group.h), and the step.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include <lockstep/clock.h>
#include "engine/core/runtime.h"
#include "ops/softmax_xent.h"
#include "parallel/runtime/world_communicators.h"
#include "parallel/observability/flight_dump.h"
#include "parallel/pipeline/pipeline_impl.h"
#include "parallel/runtime/step_common.h"

namespace ls {

// ---- construction ----------------------------------------------------------------------------

Pipeline::Impl::Impl(const World* world, std::vector<Device> devices, const ModelFactory& model,
                     const OptimizerFactory& optimizer, PipelineOptions options)
    : world_(world),
      devices_(std::move(devices)),
      options_(options),
      skips_(options_.max_consecutive_skips) {
  options_.loss = loss_or_default(std::move(options_.loss));
  const int d = static_cast<int>(devices_.size());
  LS_CHECK(model != nullptr && optimizer != nullptr,
           "Pipeline needs a model and an optimizer factory");
  LS_CHECK(options_.stages >= 1, "pipeline stages must be at least 1, got ", options_.stages);
  if (world_ != nullptr &&
      world_->size() > 1) {  // whole pipelines in every process (checked alike)
    for (int q = 0; q < world_->size(); ++q) {
      LS_CHECK(world_->local_device_count(q) % options_.stages == 0, "pipeline of ",
               options_.stages, " stages across processes: process ", q, " on ",
               world_->host_name(q), " drives ", world_->local_device_count(q),
               " device(s), not a multiple of the stages; a stage never spans processes, so "
               "give every process a multiple of ",
               options_.stages, " devices");
    }
  }
  LS_CHECK(d >= options_.stages && d % options_.stages == 0, "pipeline of ", options_.stages,
           " stages on ", d, " device(s): the device count must be a multiple of the stages; use ",
           options_.stages, ", ", 2 * options_.stages, ", ... devices or --pipeline dividing ", d);
  LS_CHECK(options_.micro_batches >= 1, "micro-batches must be at least 1, got ",
           options_.micro_batches);
  LS_CHECK(options_.timeout.count() > 0, "pipeline timeout must be positive, got ",
           options_.timeout.count(), " ms");
  pipelines_total_ = d / options_.stages;
  if (world_ != nullptr) {
    first_pipeline_ = world_->first_replica(world_->rank()) / options_.stages;
    pipelines_total_ = world_->replicas() / options_.stages;
  }
  std::vector<std::string> names;
  for (int i = 0; i < d; ++i) names.push_back(where(i));
  WorkerGroupOptions group;
  group.strategy = "Pipeline";
  group.member_noun = "stage";
  group.timeout = options_.timeout;
  group.monitor = options_;  // its MonitorOptions
  group_ = std::make_unique<WorkerGroup>(world_, std::move(names), std::move(group));
  plan(model);
  schedule_ = pipeline_schedule(options_.stages, options_.micro_batches, options_.schedule);
  build_stages(model, optimizer);
  group_->start_telemetry(devices_);
  meter_ = std::make_unique<DeviceUseMeter>(devices_, first_pipeline_ * options_.stages);
  start_trace();
  fatal_dump_ = std::make_unique<FatalSignalDump>([this] {
    return write_flight_record(options_.flight_recorder_dir,
                               stage_record("fatal signal", "the process died of a fatal signal",
                                            stage_progress()));
  });
}

void Pipeline::Impl::plan(const ModelFactory& model) {
  // A probe model on this thread: building one only declares parameters (no device memory).
  std::unique_ptr<nn::Module> probe = model();
  LS_CHECK(probe != nullptr, "the model factory returned no model");
  const std::vector<Parameter*> all = probe->parameters();
  const std::vector<nn::PipelineLayer> layers = probe->pipeline_layers();
  std::vector<bool> has_parameters;
  for (const nn::PipelineLayer& layer : layers) has_parameters.push_back(!layer.parameters.empty());
  ranges_ = split_layers(has_parameters, options_.stages);
  std::map<const Parameter*, int> index;
  for (size_t i = 0; i < all.size(); ++i) {
    index[all[i]] = static_cast<int>(i);
    parameter_names_.push_back(all[i]->name);
    parameter_shapes_.emplace_back(all[i]->shape.begin(), all[i]->shape.end());
    parameter_count_ += all[i]->numel();
  }
  std::vector<std::vector<int>> holders(all.size());
  for (int s = 0; s < options_.stages; ++s) {
    stage_layer_names_.emplace_back();
    for (int l = ranges_[static_cast<size_t>(s)].first; l < ranges_[static_cast<size_t>(s)].second;
         ++l) {
      stage_layer_names_.back().push_back(layers[static_cast<size_t>(l)].name);
      for (const Parameter* p : layers[static_cast<size_t>(l)].parameters) {
        std::vector<int>& h = holders[static_cast<size_t>(index.at(p))];
        if (h.empty() || h.back() != s) h.push_back(s);
      }
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (holders[i].size() > 1) tied_.push_back({static_cast<int>(i), holders[i]});
  }
}

void Pipeline::Impl::build_stages(const ModelFactory& model, const OptimizerFactory& optimizer) {
  const int p = options_.stages, n = local_pipelines();
  // Stage s of every pipeline all-reduces its gradients with the others: one clique per stage
  // (across processes: over the stage-s devices of every process).
  std::vector<std::vector<std::unique_ptr<Communicator>>> comms(static_cast<size_t>(p));
  const bool data_parallel = pipelines() > 1;
  if (data_parallel) {
    CommunicatorOptions comm_options;
    comm_options.timeout = 2 * options_.timeout + std::chrono::seconds(1);
    for (int s = 0; s < p; ++s) {
      std::vector<Device> group;
      for (int r = 0; r < n; ++r) group.push_back(devices_[static_cast<size_t>(r * p + s)]);
      comms[static_cast<size_t>(s)] =
          world_ != nullptr
              ? make_world_communicators(*world_->with_local_devices(group), comm_options)
              : make_communicators(group, comm_options);
    }
  }
  group_->build([&](size_t i) -> std::unique_ptr<GroupMember> {
    const int s = static_cast<int>(i) % p, r = static_cast<int>(i) / p;
    StageConfig config{s,
                       p,
                       ranges_[static_cast<size_t>(s)].first,
                       ranges_[static_cast<size_t>(s)].second,
                       options_.micro_batches,
                       options_.seed,
                       options_.timeout,
                       {},
                       options_.loss,
                       options_.recompute == Recompute::kBlocks,
                       options_.schedule,
                       options_.check_loss_contract};
    const int base = static_cast<int>(i) - s;
    for (int j = 0; j < p; ++j) config.pipeline.push_back(devices_[static_cast<size_t>(base + j)]);
    std::unique_ptr<Communicator> comm =
        data_parallel ? std::move(comms[static_cast<size_t>(s)][static_cast<size_t>(r)]) : nullptr;
    return std::make_unique<PipelineStage>(config, devices_[i], model, optimizer, std::move(comm));
  });
  for (size_t i = 0; i < stage_count(); ++i) {
    const int s = static_cast<int>(i) % p, base = static_cast<int>(i) - s;
    std::vector<StageInbox*> inboxes;
    for (int j = 0; j < p; ++j) inboxes.push_back(&stage(static_cast<size_t>(base + j)).inbox());
    std::vector<TiedParameter> mine;
    for (const TiedParameter& t : tied_) {
      for (int h : t.holders) {
        if (h == s) mine.push_back(t);
      }
    }
    stage(i).connect(std::move(inboxes), std::move(mine));
  }
}

std::string Pipeline::Impl::where(int index) const {
  const int p = options_.stages;
  std::string out = "stage " + std::to_string(index % p);
  if (pipelines() > 1) out += " of pipeline " + std::to_string(first_pipeline_ + index / p);
  return out + " on " + devices_[static_cast<size_t>(index)].str();
}

// ---- running a job on every stage ------------------------------------------------------------

namespace {

// Pipeline's stall detector: no progress anywhere (host phases or device actions) for the
// timeout. Stages wait for each other, so a stalled one stops the rest: the report names the
// stage whose next action has its input already.
class StageStalls final : public StallDetector {
 public:
  StageStalls(std::chrono::milliseconds timeout, std::function<uint64_t()> signature,
              std::function<std::string()> describe,
              std::function<std::string(std::chrono::milliseconds)> report)
      : timeout_(timeout),
        signature_(std::move(signature)),
        describe_(std::move(describe)),
        report_(std::move(report)),
        last_(signature_()),
        last_change_(Clock::now()) {}
  std::chrono::milliseconds period() const override { return std::chrono::milliseconds(5); }
  std::optional<std::string> check(Clock::time_point now) override {
    const uint64_t current = signature_();
    if (current != last_) {
      last_ = current;
      last_change_ = now;
      return std::nullopt;
    }
    if (now - last_change_ <= timeout_) return std::nullopt;
    return report_(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_change_));
  }
  std::string describe(Clock::time_point) override { return describe_(); }

 private:
  std::chrono::milliseconds timeout_;
  std::function<uint64_t()> signature_;
  std::function<std::string()> describe_;
  std::function<std::string(std::chrono::milliseconds)> report_;
  uint64_t last_;
  Clock::time_point last_change_;
};

}  // namespace

// A stall found here has its report name this process's flight file (stall_report); a timeout
// another process told this one of (its error replaces this process's own report) names this
// process's file too, so that every process of a World leaves its own, as DataParallel does.
void Pipeline::Impl::run_on_stages(const std::function<void(size_t, PipelineStage&)>& job,
                                   const char* what) {
  flight_note_.clear();
  StageStalls stalls(
      options_.timeout, [this] { return progress_signature(); },
      [this] { return describe_stages(); },
      [this](std::chrono::milliseconds quiet) { return stall_report(quiet); });
  try {
    group_->run_on_all([&](size_t i) { job(i, stage(i)); }, what, steps_ + 1, stalls);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kTimeout) throw;
    if (!flight_note_.empty() && e.message().find(flight_note_) != std::string::npos) throw;
    const std::string note =
        flight_record_note(options_.flight_recorder_dir,
                           stage_record("timeout", e.message(), stage_progress()));
    throw Error(e.message() + note, e.file().c_str(), e.line(), e.context(), e.kind());
  }
}

int Pipeline::Impl::device_done(const PipelineStage& stage) const {
  int k = 0;
  while (stage.action_done(k)) ++k;
  return k;
}

uint64_t Pipeline::Impl::progress_signature() const {
  uint64_t signature = 0;
  for (size_t i = 0; i < stage_count(); ++i) {
    signature = signature * 1000003u + stage(i).ticks() * 131u +
                static_cast<uint64_t>(device_done(stage(i)));
  }
  return signature;
}

std::string Pipeline::Impl::describe_stages() const {
  std::string all;
  for (size_t i = 0; i < stage_count(); ++i) {
    const PipelineStage& st = stage(i);
    const int s = static_cast<int>(i) % options_.stages;
    if (!all.empty()) all += "; ";
    all += where(static_cast<int>(i)) + ": host in " + st.position() + ", device ran " +
           std::to_string(device_done(st)) + " of " +
           std::to_string(schedule_[static_cast<size_t>(s)].size()) + " actions";
  }
  return all;
}

std::vector<StageProgress> Pipeline::Impl::stage_progress() const {
  const int p = options_.stages;
  auto index_of = [this](int s, PipelineAction a) {
    const auto& actions = schedule_[static_cast<size_t>(s)];
    return static_cast<int>(std::find(actions.begin(), actions.end(), a) - actions.begin());
  };
  std::vector<StageProgress> out;
  for (size_t i = 0; i < stage_count(); ++i) {
    const int s = static_cast<int>(i) % p, base = static_cast<int>(i) - s;
    const auto& actions = schedule_[static_cast<size_t>(s)];
    const PipelineStage& st = stage(i);
    StageProgress progress{s,
                           first_pipeline_ + static_cast<int>(i) / p,
                           devices_[i],
                           steps_ + 1,
                           st.position(),
                           device_done(st),
                           st.actions_enqueued(),
                           static_cast<int>(actions.size()),
                           {},
                           false};
    if (progress.actions_done < progress.actions) {
      // Its input: the previous stage's activations (forward), the next one's gradient
      // (backward), or the stage's own backward (weight gradient: ready, as it ran before).
      const PipelineAction next = actions[static_cast<size_t>(progress.actions_done)];
      const bool forward = next.kind == PipelineAction::Kind::kForward;
      const int from = forward ? s - 1 : s + 1;
      progress.next_action = std::string(action_name(next.kind)) + " of micro-batch " +
                             std::to_string(next.micro_batch);
      progress.input_ready =
          next.kind == PipelineAction::Kind::kWeight || from < 0 || from >= p ||
          stage(static_cast<size_t>(base + from)).action_done(index_of(from, next));
    }
    out.push_back(std::move(progress));
  }
  return out;
}

std::string Pipeline::Impl::stall_report(std::chrono::milliseconds quiet) {
  // The stalled stage is the one whose next action on the device has its input already (and is
  // enqueued): it is running (or stuck in) that action, while the others wait for it.
  const std::vector<StageProgress> stages = stage_progress();
  std::string culprit;
  for (size_t i = 0; i < stages.size() && culprit.empty(); ++i) {
    const StageProgress& s = stages[i];
    if (s.input_ready && s.actions_done < s.actions_enqueued) {
      culprit = where(static_cast<int>(i)) + " stalled in " + s.next_action;
    }
  }
  if (culprit.empty()) culprit = "the stages stalled after their forward and backward actions";
  std::string report = "no stage made progress for " + std::to_string(quiet.count()) +
                       " ms (timeout " + std::to_string(options_.timeout.count()) +
                       " ms): " + culprit + "; " + describe_stages();
  flight_note_ =
      flight_record_note(options_.flight_recorder_dir, stage_record("timeout", report, stages));
  return report + flight_note_;
}

FlightRecord Pipeline::Impl::stage_record(std::string reason, std::string report,
                                          std::vector<StageProgress> stages) const {
  return {.reason = std::move(reason),
          .report = std::move(report),
          .process = world_ != nullptr ? world_->rank() : 0,
          .processes = world_ != nullptr ? world_->size() : 1,
          .replicas = {},
          .stages = std::move(stages),
          .now = std::chrono::steady_clock::now()};
}

// ---- the step --------------------------------------------------------------------------------

StepResult Pipeline::Impl::step(const data::Batch& batch) {
  LS_CHECK(batch.inputs.empty(), "Pipeline takes a batch of images or tokens; named inputs "
           "(data::Batch::inputs) train with DataParallel for now");
  const int64_t features = check_batch(batch);
  const int64_t n = pipelines(), m = options_.micro_batches;
  LS_CHECK(batch.size % n == 0, "global batch ", batch.size, " does not divide by the ", n,
           " pipelines (", n * options_.stages, " devices / ", options_.stages,
           " stages); use a multiple of ", n);
  LS_CHECK(batch.size / n >= m, "micro-batches ", m, " exceed the ", batch.size / n,
           " rows each pipeline gets of the batch of ", batch.size,
           "; use at most that many micro-batches or a bigger batch");
  check_targets_kind(*options_.loss, batch);
  const int64_t global_labels = shard_of(batch, features, 0, batch.size).counted_labels();
  LS_CHECK(global_labels > 0, "every label of the batch is kIgnoreLabel (", kIgnoreLabel,
           "), so it has no loss to train on; drop such batches");
  std::vector<StageOutcome> outcomes(stage_count());
  const int p = options_.stages;
  group_->set_telemetry_step(steps_ + 1);
  const auto started = std::chrono::steady_clock::now();
  const int64_t started_ns = steady_now_ns();
  const int64_t step = steps_ + 1;
  const bool traced = trace_ && trace_->traces(step);
  run_on_stages(
      [&](size_t index, PipelineStage& stage) {
        const int64_t run_start = traced ? steady_now_ns() : 0;
        const int64_t r = first_pipeline_ + static_cast<int64_t>(index) / p, rows = batch.size / n;
        const Shard shard = shard_of(batch, features, r * rows, (r + 1) * rows);
        outcomes[index] =
            stage.run(shard, global_labels, schedule_[static_cast<size_t>(stage.stage())], steps_,
                      options_.seed);
        if (traced) {
          trace_->device_thread_span(index, "run step " + std::to_string(step), step, run_start,
                                     steady_now_ns());
        }
      },
      "step");
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  double loss_sum = 0;
  bool nonfinite = false;
  int64_t nonfinite_values = 0;  // in pipeline 0's summed gradients (each pipeline's are those)
  for (size_t i = 0; i < stage_count(); ++i) {
    if (static_cast<int>(i) % p == p - 1) loss_sum += outcomes[i].loss_sum;
    nonfinite = nonfinite || outcomes[i].nonfinite != 0;
    if (static_cast<int>(i) < p) nonfinite_values += outcomes[i].nonfinite;
  }
  // Every process's last stages, in process order; any non-finite stage skips everywhere.
  const std::array<double, 3> mine{
      loss_sum, nonfinite ? 1.0 : 0.0,
      processes().rank() == 0 ? static_cast<double>(nonfinite_values) : 0.0};
  const std::vector<double> sums =
      processes().sum_over_processes(mine, "step: combining the processes' losses");
  loss_sum = sums[0];
  nonfinite = sums[1] > 0;
  nonfinite_values = static_cast<int64_t>(sums[2]);
  const float loss = static_cast<float>(loss_sum / static_cast<double>(global_labels));
  const bool skipped = nonfinite || !std::isfinite(loss);
  // Under ZB-H1 every stage has stepped already (Note [Post-validation]): keep or undo it.
  const bool post_validates = splits_backward(options_.schedule);
  std::vector<OptimizerSpan> optimizers(stage_count());
  run_on_stages(
      [&](size_t index, PipelineStage& stage) {
        const int64_t optimizer_start = traced ? steady_now_ns() : 0;
        optimizers[index] = stage.step(!skipped);
        if (traced) {
          trace_->device_thread_span(index, "optimizer step " + std::to_string(step), step,
                                     optimizer_start, steady_now_ns());
        }
      },
      "optimizer step");
  ++steps_;
  account_step(outcomes, optimizers, started_ns, steady_now_ns());
  stats_ = {};
  stats_.step_ms = step_ms;
  for (int s = 0; s < p; ++s) {
    const double busy = outcomes[static_cast<size_t>(s)].busy_ms;
    stats_.busy_ms.push_back(busy);
    // Under post-validation (ZB-H1) the stage's optimizer ran inside step_ms: not its actions'.
    const OptimizerSpan& own = optimizers[static_cast<size_t>(s)];
    const double window =
        step_ms - (post_validates ? static_cast<double>(own.end_ns - own.begin_ns) / 1e6 : 0.0);
    stats_.bubble.push_back(window > 0 ? std::max(0.0, 1.0 - busy / window) : 0.0);
    stats_.mean_bubble += stats_.bubble.back() / p;
  }
  stats_.theoretical_bubble = theoretical_bubble(p, options_.micro_batches, options_.schedule);
  // The same decision in every process (the loss and the non-finite flags were combined).
  if (auto why = skips_.record({step, skipped, loss, nonfinite_values})) {
    processes().fail(ErrorKind::kNonFinite, processes().prefix() + *why);
  }
  return {loss, skipped};
}

void Pipeline::Impl::start_trace() {
  if (options_.trace.path.empty()) return;
  std::vector<StepTrace::DeviceTrack> tracks;
  for (size_t i = 0; i < stage_count(); ++i) {
    const int p = options_.stages;
    std::string role = "stage " + std::to_string(static_cast<int>(i) % p);
    if (pipelines_total_ > 1) {
      role += " of pipeline " + std::to_string(first_pipeline_ + static_cast<int>(i) / p);
    }
    tracks.push_back({devices_[i], role, stage(i).clock_offset_ns(), {}});
  }
  trace_ = std::make_unique<StepTrace>(options_.trace, world_ != nullptr ? world_->rank() : 0,
                                       std::move(tracks));
}

void Pipeline::Impl::account_step(const std::vector<StageOutcome>& outcomes,
                                  const std::vector<OptimizerSpan>& optimizers, int64_t start_ns,
                                  int64_t end_ns) {
  std::vector<DeviceUseMeter::StageStep> stages;
  std::vector<StepTrace::StageStep> traced;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const StageTimeline& t = outcomes[i].timeline;
    int64_t last_action_end = t.input_ns;
    for (const StageAction& a : t.actions) last_action_end = std::max(last_action_end, a.end_ns);
    stages.push_back({t.begin_ns, t.input_ns, last_action_end, t.actions_end_ns,
                      optimizers[i].begin_ns, optimizers[i].end_ns, outcomes[i].busy_ms,
                      optimizers[i].validated_ns});
    traced.push_back({t, optimizers[i]});
  }
  meter_->add_pipeline(steps_, stages);
  if (trace_ && trace_->traces(steps_)) {
    trace_->caller_span("step " + std::to_string(steps_), steps_, start_ns, end_ns);
    trace_->add_pipeline_step(steps_, traced);
  }
}

EvalResult Pipeline::Impl::evaluate(const data::Dataset& dataset, int64_t batch_size) {
  meter_->interrupt();  // not a step: the gap before the next one is not idle
  LS_CHECK(batch_size > 0, "evaluate: batch size must be positive, got ", batch_size);
  check_evaluable(*options_.loss);
  LS_CHECK(dataset.count > 0, "evaluate: the data set '", dataset.name, "' is empty");
  data::check_dataset(dataset);
  const int p = options_.stages, n = pipelines(), local = local_pipelines();
  std::vector<EvalCounts> counts(stage_count());
  run_on_stages(
      [&](size_t index, PipelineStage& stage) {
        const int64_t r = first_pipeline_ + static_cast<int64_t>(index) / p;
        const int64_t begin = dataset.count * r / n, end = dataset.count * (r + 1) / n;
        const Shard rows = shard_of(dataset, dataset.features, begin, end);
        if (rows.rows > 0) counts[index] = stage.evaluate(rows, batch_size);
      },
      "evaluate");
  std::vector<EvalCounts> last_stages;  // in pipeline order
  for (int r = 0; r < local; ++r) last_stages.push_back(counts[static_cast<size_t>(r * p + p - 1)]);
  const EvalResult result = combine_eval_counts(last_stages, processes());
  LS_CHECK(result.examples > 0, "evaluate: every label of '", dataset.name,
           "' is kIgnoreLabel; there is nothing to evaluate");
  return result;
}

std::vector<DataParallel::NamedParameter> Pipeline::Impl::named_parameters() {
  std::map<std::string, size_t> index;  // a parameter's place in registration order
  for (size_t k = 0; k < parameter_names_.size(); ++k) index[parameter_names_[k]] = k;
  std::vector<DataParallel::NamedParameter> out(parameter_names_.size());
  for (int s = 0; s < options_.stages; ++s) {  // pipeline 0; tied ones from the first holder
    for (DataParallel::NamedParameter& p : stage_parameters(0, s)) {
      DataParallel::NamedParameter& slot = out[index.at(p.name)];
      if (slot.name.empty()) slot = std::move(p);
    }
  }
  return out;
}

std::vector<DataParallel::NamedParameter> Pipeline::Impl::stage_parameters(int pipeline,
                                                                           int stage) {
  group_->check_usable("read parameters");
  LS_CHECK(pipeline >= 0 && pipeline < local_pipelines() && stage >= 0 && stage < options_.stages,
           "stage_parameters: pipeline ", pipeline, " stage ", stage,
           " does not exist; this "
           "process has ",
           local_pipelines(), " pipeline(s) of ", options_.stages, " stages");
  std::vector<DataParallel::NamedParameter> out;
  run_on(pipeline * options_.stages + stage, [&](PipelineStage& s) {
    const std::vector<float> flat = s.store().values_to_host(s.compute_stream());
    const auto& params = s.store().parameters();
    for (size_t j = 0; j < params.size(); ++j) {
      const auto k = static_cast<size_t>(s.model_indices()[j]);
      const auto begin = flat.begin() + static_cast<std::ptrdiff_t>(params[j]->offset);
      out.push_back({parameter_names_[k], parameter_shapes_[k],
                     std::vector<float>(begin, begin + params[j]->numel())});
    }
  });
  return out;
}

// ---- the public class ------------------------------------------------------------------------

Pipeline::Pipeline(std::vector<Device> devices, ModelFactory model, OptimizerFactory optimizer,
                   PipelineOptions options)
    : impl_(std::make_unique<Impl>(nullptr, std::move(devices), model, optimizer, options)) {}
Pipeline::Pipeline(const World& world, ModelFactory model, OptimizerFactory optimizer,
                   PipelineOptions options)
    : impl_(std::make_unique<Impl>(&world, world.local_devices(), model, optimizer, options)) {}
Pipeline::~Pipeline() = default;

Pipeline::Impl::~Impl() {
  fatal_dump_.reset();  // the stages go next: a signal from now on finds no record to write
  if (!trace_) return;
  try {  // a run that ended inside the traced range: what it traced
    trace_->finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep: the trace was not written: %s\n", e.what());
  }
}

UseVerdict Pipeline::device_use() const { return impl_->device_use(); }
UseVerdict Pipeline::device_use_all_processes() { return impl_->device_use_all_processes(); }
void Pipeline::trace_span(const std::string& thread, const std::string& name, int64_t begin_ns,
                          int64_t end_ns) {
  impl_->trace_span(thread, name, begin_ns, end_ns);
}
StepResult Pipeline::step(const data::Batch& batch) { return impl_->step(batch); }
int64_t Pipeline::step_async(const data::Batch& batch) {
  const StepResult done = impl_->step(batch);
  const int64_t number = impl_->steps_taken();
  untaken_[number] = done;
  // Like DataParallel, keep a bounded number of results nobody took (a loop of step_async()
  // alone must not grow without end).
  constexpr size_t kKeptResults = 64;
  if (untaken_.size() > kKeptResults) untaken_.erase(untaken_.begin());
  return number;
}
StepResult Pipeline::result(int64_t step) {
  const auto it = untaken_.find(step);
  LS_CHECK(it != untaken_.end(), "result: step ", step,
           " was not queued by step_async(), or its result was taken already (each step's "
           "result is returned once)");
  const StepResult out = it->second;
  untaken_.erase(it);
  return out;
}
std::string Pipeline::layout() const {
  return "pipeline of " + std::to_string(impl_->stages()) + " stages x " +
         std::to_string(impl_->pipelines());
}
EvalResult Pipeline::evaluate(const data::Dataset& dataset, int64_t batch_size) {
  return impl_->evaluate(dataset, batch_size);
}
int Pipeline::stages() const { return impl_->stages(); }
int Pipeline::pipelines() const { return impl_->pipelines(); }
int Pipeline::local_pipelines() const { return impl_->local_pipelines(); }
const std::vector<Device>& Pipeline::devices() const { return impl_->devices(); }
int64_t Pipeline::steps_taken() const { return impl_->steps_taken(); }
int64_t Pipeline::skipped_steps() const { return impl_->skipped_steps(); }
int64_t Pipeline::parameter_count() const { return impl_->parameter_count(); }
std::vector<std::vector<std::string>> Pipeline::stage_layers() const {
  return impl_->stage_layers();
}
PipelineStepStats Pipeline::last_step_stats() const { return impl_->last_step_stats(); }

StepStats Pipeline::step_stats() const {
  const PipelineStepStats stats = impl_->last_step_stats();
  return {stats.mean_bubble, stats.theoretical_bubble};
}
std::vector<DataParallel::NamedParameter> Pipeline::named_parameters() {
  return impl_->named_parameters();
}
std::vector<DataParallel::NamedParameter> Pipeline::stage_parameters(int pipeline, int stage) {
  return impl_->stage_parameters(pipeline, stage);
}

}  // namespace ls
