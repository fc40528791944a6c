// DataParallel (see lockstep/data_parallel.h) and its Impl
// (parallel/data_parallel/data_parallel_impl.h): construction, the step, evaluation, and the
// stall detector (the Watchdog) for the runtime that runs a job on every replica
// (parallel/engine/worker_group.h).
#include <lockstep/data_parallel.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <set>

#include <lockstep/clock.h>
#include <lockstep/nn/module.h>
#include "engine/core/runtime.h"
#include "engine/model/nn/transformer.h"
#include "engine/model/optim/optimizer.h"
#include "ops/host/onednn_matmul.h"
#include "ops/softmax_xent.h"
#include "parallel/data_parallel/data_parallel_impl.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/observability/flight_dump.h"
#include "parallel/runtime/world_communicators.h"
#include "parallel/runtime/step_common.h"

namespace ls {

// ---- the public class: the implementation's methods ------------------------------------------

DataParallel::DataParallel(std::vector<Device> devices, ModelFactory model,
                           OptimizerFactory optimizer, DataParallelOptions options)
    : impl_(std::make_unique<Impl>(nullptr, std::move(devices), model, optimizer,
                                   std::move(options), EngineHooks{})) {}

DataParallel::DataParallel(const World& world, ModelFactory model, OptimizerFactory optimizer,
                           DataParallelOptions options)
    : impl_(std::make_unique<Impl>(&world, world.local_devices(), model, optimizer,
                                   std::move(options), EngineHooks{})) {}

DataParallel::DataParallel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  LS_CHECK(impl_ != nullptr, "DataParallel: no implementation given");
}

// Builds a DataParallel from an implementation (its private constructor's one caller).
struct DataParallelAccess {
  template <typename... Args>
  static std::unique_ptr<DataParallel> make(Args&&... args) {
    return std::unique_ptr<DataParallel>(
        new DataParallel(std::make_unique<DataParallel::Impl>(std::forward<Args>(args)...)));
  }
};

std::unique_ptr<DataParallel> make_data_parallel(std::vector<Device> devices, ModelFactory model,
                                                 OptimizerFactory optimizer,
                                                 DataParallelOptions options,
                                                 const EngineHooks& hooks) {
  return DataParallelAccess::make(nullptr, std::move(devices), model, optimizer, std::move(options),
                                  hooks);
}

std::unique_ptr<DataParallel> make_data_parallel(const World& world, ModelFactory model,
                                                 OptimizerFactory optimizer,
                                                 DataParallelOptions options,
                                                 const EngineHooks& hooks) {
  return DataParallelAccess::make(&world, world.local_devices(), model, optimizer,
                                  std::move(options), hooks);
}

DataParallel::~DataParallel() = default;

StepResult DataParallel::step(const data::Batch& batch) { return impl_->step(batch); }
int64_t DataParallel::step_async(const data::Batch& batch) { return impl_->step_async(batch); }
StepResult DataParallel::result(int64_t step) { return impl_->result(step); }
int64_t DataParallel::graph_launches() const { return impl_->graph_launches(); }
int64_t DataParallel::graph_nodes() const { return impl_->graph_nodes(); }
bool DataParallel::graphs() const { return impl_->graphs(); }
EvalResult DataParallel::evaluate(const data::Dataset& dataset, int64_t batch_size) {
  return impl_->evaluate(dataset, batch_size);
}
int DataParallel::size() const { return impl_->size(); }
int DataParallel::local_size() const { return impl_->local_size(); }
const std::vector<Device>& DataParallel::devices() const { return impl_->devices(); }
int64_t DataParallel::steps_taken() const { return impl_->steps_taken(); }
int64_t DataParallel::skipped_steps() const { return impl_->skipped_steps(); }
int64_t DataParallel::parameter_count() const { return impl_->parameter_count(); }
const std::vector<Bucket>& DataParallel::buckets() const { return impl_->buckets(); }
std::string DataParallel::layout() const {
  std::string out = std::to_string(impl_->buckets().size()) + " gradient bucket(s)";
  if (size() == 1) return out;  // one replica shards nothing
  switch (impl_->shard()) {
    case ShardMode::kNone: break;
    case ShardMode::kOptimizer: out += ", ZeRO-1 (optimizer state sharded)"; break;
    case ShardMode::kGradients: out += ", ZeRO-2 (optimizer state and gradients sharded)"; break;
    case ShardMode::kParameters:
      out += ", ZeRO-3 (parameters, gradients, optimizer sharded)";
      break;
  }
  return out;
}

StepStats DataParallel::step_stats() const { return {}; }  // no bubble to tell

std::vector<NamedParameter> DataParallel::model_parameters() { return named_parameters(0); }
std::string DataParallel::save(const std::string& dir, const TrainingPosition& position,
                               const CheckpointRetention& retention) {
  const int64_t begin = steady_now_ns();
  std::string committed = impl_->save(dir, position, retention);
  impl_->trace_span(kCallerThread, "checkpoint save", begin, steady_now_ns());
  return committed;
}
TrainingPosition DataParallel::load(const std::string& dir) { return impl_->load(dir); }
std::vector<float> DataParallel::parameters(int replica) { return impl_->parameters(replica); }
std::vector<DataParallel::NamedParameter> DataParallel::named_parameters(int replica) {
  const std::vector<float> flat = impl_->parameters(replica);
  std::vector<NamedParameter> out;
  for (const Parameter* p : impl_->parameter_layout()) {
    const auto begin = flat.begin() + static_cast<std::ptrdiff_t>(p->offset);
    out.push_back({p->name,
                   {p->shape.begin(), p->shape.end()},
                   std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(p->numel()))});
  }
  return out;
}
BucketTimeline DataParallel::last_timeline(int replica) { return impl_->last_timeline(replica); }
UseVerdict DataParallel::device_use() const { return impl_->device_use(); }
UseVerdict DataParallel::device_use_all_processes() { return impl_->device_use_all_processes(); }
void DataParallel::trace_span(const std::string& thread, const std::string& name,
                              int64_t begin_ns, int64_t end_ns) {
  impl_->trace_span(thread, name, begin_ns, end_ns);
}
DataParallel::StateBytes DataParallel::state_bytes(int replica) {
  return impl_->state_bytes(replica);
}
const char* shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::kNone: return "none";
    case ShardMode::kOptimizer: return "optimizer";
    case ShardMode::kGradients: return "gradients";
    case ShardMode::kParameters: return "parameters";
  }
  return "?";
}
AllocatorStats DataParallel::allocator_stats(int replica) const {
  return impl_->allocator_stats(replica);
}

// ---- construction and tear-down ------------------------------------------------------------

DataParallel::Impl::Impl(const World* world, std::vector<Device> devices, const ModelFactory& model,
                         const OptimizerFactory& optimizer, DataParallelOptions options,
                         const EngineHooks& hooks)
    : world_(world),
      devices_(std::move(devices)),
      options_(std::move(options)),
      skips_(options_.max_consecutive_skips) {
  LS_CHECK(!devices_.empty(), "DataParallel needs at least one device");
  first_replica_ = world_ != nullptr ? world_->first_replica(world_->rank()) : 0;
  replicas_total_ = world_ != nullptr ? world_->replicas() : static_cast<int>(devices_.size());
  std::vector<std::string> names;
  for (size_t r = 0; r < devices_.size(); ++r) {
    names.push_back("replica " + std::to_string(first_replica_ + static_cast<int>(r)) + " on " +
                    devices_[r].str());
  }
  WorkerGroupOptions group;
  group.timeout = options_.timeout;
  group.monitor = options_;  // its MonitorOptions
  group_ = std::make_unique<WorkerGroup>(world_, std::move(names), std::move(group));
  LS_CHECK(options_.accumulate >= 1, "accumulate must be >= 1 micro-batch, got ",
           options_.accumulate);
  LS_CHECK(model != nullptr && optimizer != nullptr,
           "DataParallel needs a model and an optimizer factory");
  LS_CHECK(options_.timeout.count() > 0, "timeout must be positive");
  LS_CHECK(options_.steps_in_flight >= 1 && options_.steps_in_flight < StepOutcomes::kSlots,
           "steps_in_flight is ", options_.steps_in_flight, "; it must be 1 to ",
           StepOutcomes::kSlots - 1);
  LS_CHECK(options_.graph_warmup >= 1, "graph_warmup is ", options_.graph_warmup,
           "; a step must run eagerly at least once before it is captured");
  if (options_.precision == Precision::kF16) check_loss_scale_config(options_.loss_scale);
  options_.loss = loss_or_default(std::move(options_.loss));
  say_if_bf16_is_emulated();
  build_replicas(model, optimizer, hooks);
  run_on_all([](Replica& r) { r.broadcast_parameters(); }, "broadcast of initial parameters");
  buckets_ = replica(0).reducer().buckets();
  parameter_count_ = replica(0).store().parameter_count();
  group_->start_telemetry(devices_);
  meter_ = std::make_unique<DeviceUseMeter>(devices_, first_replica_);
  start_trace();
  fatal_dump_ = std::make_unique<FatalSignalDump>([this] {
    FlightRecord record{.reason = "fatal signal",
                        .report = "the process died of a fatal signal",
                        .process = world_ != nullptr ? world_->rank() : 0,
                        .processes = world_ != nullptr ? world_->size() : 1,
                        .replicas = progress(),
                        .stages = {},
                        .now = std::chrono::steady_clock::now()};
    return write_flight_record(options_.flight_recorder_dir, record);
  });
}

// Note [Graphs with several GPUs in one process]
// NCCL's guide ("Using NCCL with CUDA Graphs") warns that capturing NCCL work with several GPUs
// per process "may result in deadlocks". Until a run on several GPUs has shown lockstep's
// capture to be safe (the CUDA tests CudaFailure.* and CudaStepGraphs.* on 2+ GPUs,
// tests/parallel/cuda_multi_gpu_test.cpp, both run by scripts/gpu-check), graphs are off by
// default when this process drives more than one GPU; DataParallelOptions::graphs = true
// (--graphs) turns them on. Host devices and one GPU per process keep them on: the host backend
// replays its collectives through the communicator, and one GPU per process is the case NCCL's
// guide supports.
bool graphs_by_default(const std::vector<Device>& local_devices) {
  const bool cuda = std::any_of(local_devices.begin(), local_devices.end(),
                                [](const Device& d) { return d.is_cuda(); });
  return !(cuda && local_devices.size() > 1);
}

// bf16 on host devices runs on the CPU's bf16 units through oneDNN where it can; elsewhere it is
// emulated (operands rounded to bf16, multiplied in f32): bf16's numerics at about f32's speed
// (docs/benchmarks.md, issue 24 part 4), which a user asking for bf16 expects to be told. Said once
// per DataParallel, by the first process only.
void DataParallel::Impl::say_if_bf16_is_emulated() const {
  const bool host = std::any_of(devices_.begin(), devices_.end(),
                                [](const Device& d) { return d.kind == DeviceKind::kHost; });
  if (options_.precision != Precision::kBF16 || !host || onednn::native_bf16_enabled()) return;
  if (world_ != nullptr && world_->rank() != 0) return;
  const std::string message =
      "bf16 on host devices is emulated: its products round their operands to bf16 and multiply "
      "in f32, with bf16's numerics at about f32's speed. The CPU's bf16 units need AVX512-BF16 "
      "or AMX, a build with oneDNN (libdnnl-dev), and LOCKSTEP_ONEDNN unset" +
      std::string(onednn::native_bf16_available() ? " (it is set to off here)" : "");
  if (options_.notice) {
    options_.notice(message);
  } else {
    std::fprintf(stderr, "lockstep: %s\n", message.c_str());
  }
}

bool DataParallel::Impl::graphs() const {
  return options_.graphs.value_or(graphs_by_default(devices_));
}

StepOptions DataParallel::Impl::step_options() const {
  StepOptions step;
  step.precision = options_.precision;
  step.loss_scale = options_.loss_scale;
  step.graphs = graphs();
  step.graph_warmup = options_.graph_warmup;
  step.loss = options_.loss;
  step.check_loss_contract = options_.check_loss_contract;
  step.bf16_weight_copy = options_.bf16_weight_copy;
  step.recompute = options_.recompute == Recompute::kBlocks;
  // Past the watchdog's timeout and the communicators' own backstop (build_replicas).
  step.outcome_deadline = 3 * options_.timeout + std::chrono::seconds(2);
  // One line per reason, from replica 0 only (every replica meets the same reasons).
  auto told = std::make_shared<std::set<std::string>>();
  auto mutex = std::make_shared<std::mutex>();
  std::function<void(const std::string&)> notice = options_.notice;
  if (!notice)
    notice = [](const std::string& m) { std::fprintf(stderr, "lockstep: %s\n", m.c_str()); };
  step.notice = [told, mutex, notice](const std::string& message) {
    if (current_replica() != 0) return;
    {
      std::lock_guard lock(*mutex);
      if (!told->insert(message).second) return;
    }
    notice(message);
  };
  return step;
}

void DataParallel::Impl::build_replicas(const ModelFactory& model,
                                        const OptimizerFactory& optimizer,
                                        const EngineHooks& hooks) {
  // The watchdog acts at the timeout; the communicators' own timeout is a backstop for
  // waits the watchdog cannot see, so it is set later than the watchdog's.
  CommunicatorOptions comm_options;
  comm_options.timeout = 2 * options_.timeout + std::chrono::seconds(1);
  std::vector<std::unique_ptr<Communicator>> backends =
      world_ != nullptr ? make_world_communicators(*world_, comm_options)
                        : make_communicators(devices_, comm_options);
  // In-process desync check; between processes the communicators compare their headers.
  auto checker = std::make_shared<DesyncChecker>(local_size());
  // Each replica is built on its own thread: its device state belongs to that thread.
  group_->build([&](size_t r) -> std::unique_ptr<GroupMember> {
    auto recorder = std::make_unique<RecordingCommunicator>(std::move(backends[r]), checker);
    RecordingCommunicator& recorder_ref = *recorder;
    std::unique_ptr<Communicator> comm = std::move(recorder);
    const int rank = first_replica_ + static_cast<int>(r);
    if (hooks.wrap_communicator) comm = hooks.wrap_communicator(std::move(comm), rank);
    StepOptions step = step_options();
    step.before_upload = hooks.before_upload;
    step.trace_layers = !options_.trace.path.empty();
    return std::make_unique<Replica>(rank, devices_[r], model, optimizer, std::move(comm),
                                     recorder_ref, options_.buckets, options_.seed, options_.shard,
                                     std::move(step));
  });
}

DataParallel::Impl::~Impl() {
  fatal_dump_.reset();  // nothing to dump from a trainer going away
  // Steps still queued are waited for under the watchdog (bounded), not by the replicas' drain,
  // which would wait for a collective whose peer is gone without limit.
  if (group_ && !queued_.empty() && !group_->failure().failed()) {
    try {
      finish_queued();
    } catch (...) {  // the run failed: every replica was aborted, the drain below ends
    }
  }
  if (trace_) {  // a run that ended inside the traced range: what it traced
    try {
      trace_->finish();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep: the trace was not written: %s\n", e.what());
    }
  }
}  // group_ then destroys the replicas, each on its own thread

std::vector<ReplicaProgress> DataParallel::Impl::progress() {
  std::vector<ReplicaProgress> out;
  for (size_t r = 0; r < group_->size(); ++r) {
    Replica& rep = replica(r);
    out.push_back({rep.rank(), rep.device(), rep.phase(), reported_step(),
                   rep.communicator().snapshot(), rep.communicator().waiting_for()});
  }
  return out;
}

// ---- running a job on every replica ----------------------------------------------------------

namespace {

// DataParallel's stall detector: a replica inside one collective longer than the timeout (the
// Watchdog, which also says where every replica is for the heartbeat).
// A report gets the flight recorder's note (the file of every replica's last collectives).
class CollectiveStalls final : public StallDetector {
 public:
  using FlightNote = std::function<std::string(std::vector<ReplicaProgress>, const std::string&,
                                               Clock::time_point)>;
  CollectiveStalls(std::chrono::milliseconds timeout,
                   std::function<std::vector<ReplicaProgress>()> progress, FlightNote flight_note)
      : watchdog_(timeout), progress_(std::move(progress)), flight_note_(std::move(flight_note)) {}
  std::chrono::milliseconds period() const override { return std::chrono::milliseconds(100); }
  std::optional<std::string> check(Clock::time_point now) override {
    std::vector<ReplicaProgress> progress = progress_();
    std::optional<std::string> report = watchdog_.check(progress, now);
    if (report) *report += flight_note_(std::move(progress), *report, now);
    return report;
  }
  std::string describe(Clock::time_point now) override {
    return watchdog_.describe(progress_(), now);
  }

 private:
  Watchdog watchdog_;
  std::function<std::vector<ReplicaProgress>()> progress_;
  FlightNote flight_note_;
};

}  // namespace

std::string DataParallel::Impl::flight_note(std::string reason,
                                            std::vector<ReplicaProgress> progress,
                                            const std::string& report,
                                            std::chrono::steady_clock::time_point now) {
  FlightRecord record{.reason = std::move(reason),
                      .report = report,
                      .process = world_ != nullptr ? world_->rank() : 0,
                      .processes = world_ != nullptr ? world_->size() : 1,
                      .replicas = std::move(progress),
                      .stages = {},
                      .now = now};
  flight_note_ = flight_record_note(options_.flight_recorder_dir, record);
  return flight_note_;
}

// A timeout found here has its report name the flight recorder's file (CollectiveStalls). A
// desync (raised in the replica that issued the mismatched collective), or a timeout or desync
// another process told this one of (its error replaces this process's own report), names this
// process's file too, so that every process of a World leaves its own and says where.
void DataParallel::Impl::run_on_all(const std::function<void(Replica&)>& job, const char* what) {
  flight_note_.clear();
  CollectiveStalls stalls(
      options_.timeout, [this] { return progress(); },
      [this](std::vector<ReplicaProgress> progress, const std::string& report,
             StallDetector::Clock::time_point now) {
        return flight_note("timeout", std::move(progress), report, now);
      });
  try {
    group_->run_on_all([&](size_t r) { job(replica(r)); }, what, reported_step(), stalls);
  } catch (const Error& e) {
    const bool hang = e.kind() == ErrorKind::kTimeout || e.kind() == ErrorKind::kDesync;
    if (!hang) throw;
    if (!flight_note_.empty() && e.message().find(flight_note_) != std::string::npos) throw;
    const std::string note =
        !flight_note_.empty()
            ? flight_note_
            : flight_note(e.kind() == ErrorKind::kDesync ? "desync" : "timeout", progress(),
                          e.message(), std::chrono::steady_clock::now());
    throw Error(e.message() + note, e.file().c_str(), e.line(), e.context(), e.kind());
  }
}

void DataParallel::Impl::check_replica(int replica) const {
  LS_CHECK(replica >= 0 && replica < local_size(), "replica ", replica, " does not exist (",
           local_size(), " replicas in this process)");
}

// ---- the step and evaluation -----------------------------------------------------------------

std::vector<int64_t> DataParallel::Impl::shard_rows(int64_t global_rows) const {
  const int64_t n = size();
  LS_CHECK(global_rows % n == 0 || options_.allow_uneven_shards, "global batch ", global_rows,
           " does not divide by the ", n, " devices; use a multiple of ", n,
           " or allow uneven shards (--uneven-shards)");
  LS_CHECK(global_rows >= n * options_.accumulate, "global batch ", global_rows,
           " is too small for ", n, " device(s) x ", options_.accumulate,
           " micro-batch(es): each micro-batch needs at least one example");
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < n; ++r) rows.push_back(global_rows * (r + 1) / n - global_rows * r / n);
  return rows;
}

int64_t DataParallel::Impl::step_async(const data::Batch& batch) {
  check_usable("step");
  const int64_t features = check_batch(batch);
  const std::vector<int64_t> rows = shard_rows(batch.size);
  check_targets_kind(*options_.loss, batch);
  const int64_t global_labels = shard_of(batch, features, 0, batch.size).counted_labels();
  LS_CHECK(global_labels > 0, "every label of the batch is kIgnoreLabel (", kIgnoreLabel,
           "), so it has no loss to train on; drop such batches");
  while (static_cast<int>(queued_.size()) >= options_.steps_in_flight) harvest_oldest();
  group_->set_telemetry_step(steps_ + 1);
  const bool traced = trace_ && trace_->traces(steps_ + 1);
  const int64_t enqueue_start = traced ? steady_now_ns() : 0;
  run_on_all(
      [&](Replica& replica) {
        const int64_t issue_start = traced ? steady_now_ns() : 0;
        const int r = replica.rank();  // global
        const int64_t begin = std::accumulate(rows.begin(), rows.begin() + r, int64_t{0});
        const Shard shard =
            shard_of(batch, features, begin, begin + rows[static_cast<size_t>(r)]);
        replica.enqueue_step(shard, batch.size, global_labels, options_.accumulate, steps_,
                             options_.seed);
        if (traced) {
          trace_->device_thread_span(static_cast<size_t>(r - first_replica_),
                                     "issue step " + std::to_string(steps_ + 1), steps_ + 1,
                                     issue_start, steady_now_ns());
        }
      },
      "step");
  queued_.push_back({++steps_, global_labels});
  if (traced) {
    trace_->caller_span("step " + std::to_string(steps_) + " enqueued", steps_, enqueue_start,
                        steady_now_ns());
  }
  return steps_;
}

StepResult DataParallel::Impl::result(int64_t step) {
  LS_CHECK(step >= 1 && step <= steps_, "result: step ", step, " was never enqueued (", steps_,
           " steps so far; step_async() returns the numbers)");
  while (!queued_.empty() && queued_.front().step <= step) harvest_oldest();
  auto it = results_.find(step);
  LS_CHECK(it != results_.end() || step >= dropped_before_, "result: the result of step ", step,
           " was dropped: only the last ", kKeptResults,
           " results not taken yet are kept; "
           "take each step's result soon after step_async() returns its number");
  LS_CHECK(it != results_.end(), "result: the result of step ", step,
           " was taken already (each step's result is returned once)");
  const StepResult out = it->second;
  results_.erase(it);
  return out;
}

void DataParallel::Impl::trace_step(int64_t step, const std::vector<StepOutcome>& outcomes,
                                    int64_t wait_start_ns) {
  trace_->caller_span("step " + std::to_string(step) + " result (waiting)", step, wait_start_ns,
                      steady_now_ns());
  std::vector<StepTrace::DeviceStep> devices;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    devices.push_back({outcomes[i].marks, outcomes[i].launch_ns,
                       device_runtime(devices_[i]).allocator().stats().bytes_in_use,
                       outcomes[i].layer_ns, outcomes[i].layer_points});
  }
  trace_->add_step(step, devices);
}

void DataParallel::Impl::start_trace() {
  if (options_.trace.path.empty()) return;
  std::vector<StepTrace::DeviceTrack> tracks;
  const int64_t element = options_.buckets.reduce_dtype == DType::kBF16 ? 2 : 4;
  for (size_t r = 0; r < devices_.size(); ++r) {
    StepTrace::DeviceTrack track{
        devices_[r], "replica " + std::to_string(first_replica_ + static_cast<int>(r)),
        replica(r).clock_offset_ns(), {}};
    for (const Bucket& b : buckets_) track.bucket_bytes.push_back(b.count * element);
    tracks.push_back(std::move(track));
  }
  trace_ = std::make_unique<StepTrace>(options_.trace, world_ != nullptr ? world_->rank() : 0,
                                       std::move(tracks));
}

void DataParallel::Impl::finish_queued() {
  while (!queued_.empty()) harvest_oldest();
  meter_->interrupt();  // what comes next is not a step: its time is not the devices' idle time
}

void DataParallel::Impl::harvest_oldest() {
  check_usable("step");
  const QueuedStep queued = queued_.front();
  std::vector<StepOutcome> outcomes(devices_.size());
  harvesting_ = queued.step;  // errors and reports name this step, not the newest
  const bool traced = trace_ && trace_->traces(queued.step);
  const int64_t wait_start = traced ? steady_now_ns() : 0;
  try {
    run_on_all(
        [&](Replica& replica) {
          const int64_t collect_start = traced ? steady_now_ns() : 0;
          const size_t local = static_cast<size_t>(replica.rank() - first_replica_);
          outcomes[local] = replica.outcome(queued.step - 1);
          if (traced) {
            trace_->device_thread_span(local, "collect step " + std::to_string(queued.step),
                                       queued.step, collect_start, steady_now_ns());
          }
        },
        "step");
  } catch (...) {
    harvesting_ = 0;
    throw;
  }
  harvesting_ = 0;
  queued_.pop_front();
  std::vector<StepMarks> marks;
  for (const StepOutcome& o : outcomes) marks.push_back(o.marks);
  meter_->add(queued.step, marks);
  if (traced) trace_step(queued.step, outcomes, wait_start);
  const StepOutcome& outcome = outcomes[0];  // bitwise the same on every replica and process
  StepResult result{
      static_cast<float>(outcome.global_loss_sum / static_cast<double>(queued.global_labels)),
      outcome.skipped, outcome.loss_scale, outcome.graph};
  // Results nobody asks for (step() takes each at once) are not kept forever.
  if (results_.size() >= kKeptResults) {
    dropped_before_ = std::max(dropped_before_, results_.begin()->first + 1);
    results_.erase(results_.begin());
  }
  results_[queued.step] = result;
  StepVerdict verdict{queued.step, outcome.skipped, result.loss, outcome.nonfinite};
  verdict.dynamic_loss_scale = options_.precision == Precision::kF16 && options_.loss_scale.dynamic;
  verdict.loss_scale = outcome.loss_scale;
  verdict.min_loss_scale = options_.loss_scale.min_scale;
  // Every process takes this decision alike (the loss and counts are all-reduced).
  if (auto why = skips_.record(verdict)) {
    processes().fail(ErrorKind::kNonFinite, processes().prefix() + *why);
  }
}

EvalResult DataParallel::Impl::evaluate(const data::Dataset& dataset, int64_t batch_size) {
  LS_CHECK(batch_size > 0, "evaluate: batch size must be positive, got ", batch_size);
  check_evaluable(*options_.loss);
  finish_queued();
  LS_CHECK(dataset.count > 0, "evaluate: the data set '", dataset.name, "' is empty");
  data::check_dataset(dataset);
  std::vector<EvalCounts> counts(group_->size());
  const int64_t n = size();
  // ZeRO-3 gathers each layer's parameters as it runs, a collective: every replica (of every
  // process: the split below is known to all) runs as many forwards as the one with the most.
  EvalLockstep lockstep;
  const bool gathers = options_.shard == ShardMode::kParameters && n > 1;
  if (gathers) {
    for (int64_t r = 0; r < n; ++r) {
      const int64_t rows = dataset.count * (r + 1) / n - dataset.count * r / n;
      lockstep.forwards = std::max(lockstep.forwards, (rows + batch_size - 1) / batch_size);
    }
    lockstep.filler = shard_of(dataset, dataset.features, 0, 1);
  }
  run_on_all(
      [&](Replica& replica) {
        const int64_t r = replica.rank();  // global
        const int64_t begin = dataset.count * r / n, end = dataset.count * (r + 1) / n;
        const Shard rows = shard_of(dataset, dataset.features, begin, end);
        if (rows.rows > 0 || gathers) {
          counts[static_cast<size_t>(r - first_replica_)] =
              replica.evaluate(rows, batch_size, gathers ? &lockstep : nullptr);
        }
      },
      "evaluate");
  return combine_eval_counts(counts, processes());
}

std::vector<float> DataParallel::Impl::parameters(int replica) {
  finish_queued();
  check_replica(replica);
  if (!this->replica(static_cast<size_t>(replica)).store().values_sharded()) {
    return run_on<std::vector<float>>(
        replica, [](Replica& r) { return r.store().values_to_host(r.compute_stream()); });
  }
  // ZeRO-3: each local replica's range (every replica keeps one; nothing to pick).
  LS_CHECK_AS(ErrorKind::kUsage, !multiprocess(), "DataParallel::parameters: with sharded "
              "parameters (--shard parameters) across processes no process holds them all; "
              "save a checkpoint (it gathers them) and read it");
  std::vector<float> values;
  for (int holder = 0; holder < local_size(); ++holder) {
    run_on<int>(holder, [&](Replica& r) {
      values.resize(static_cast<size_t>(r.store().flat_size()));
      const std::vector<float> part = r.store().values_to_host(r.compute_stream());
      std::copy(part.begin(), part.end(),
                values.begin() + static_cast<std::ptrdiff_t>(r.store().shard_size() * r.rank()));
      return 0;
    });
  }
  return values;
}

DataParallel::StateBytes DataParallel::Impl::state_bytes(int replica) {
  check_replica(replica);
  return this->replica(static_cast<size_t>(replica)).state_bytes();
}

BucketTimeline DataParallel::Impl::last_timeline(int replica) {
  finish_queued();
  return run_on<BucketTimeline>(replica, [](Replica& r) { return r.last_timeline(); });
}

AllocatorStats DataParallel::Impl::allocator_stats(int replica) const {
  check_replica(replica);
  return device_runtime(devices_[static_cast<size_t>(replica)]).allocator().stats();
}

// ---- factories -------------------------------------------------------------------------------

OptimizerFactory make_optimizer_factory(const OptimizerSpec& spec) {
  LS_CHECK(spec.kind == "adamw" || spec.kind == "sgd", "unknown optimizer '", spec.kind,
           "'; use adamw or sgd");
  return [spec](const Tensor& params, Stream& stream) -> std::unique_ptr<optim::Optimizer> {
    if (spec.kind == "adamw") {
      AdamWConfig config;
      config.lr = spec.lr;
      config.weight_decay = spec.weight_decay;
      return std::make_unique<optim::AdamW>(params, config, stream);
    }
    SgdConfig config;
    config.lr = spec.lr;
    config.momentum = spec.momentum;
    config.weight_decay = spec.weight_decay;
    return std::make_unique<optim::Sgd>(params, config, stream);
  };
}

ModelFactory mlp_factory(std::vector<int64_t> widths) {
  return [widths] { return nn::mlp(widths); };
}

ModelFactory transformer_factory(nn::TransformerConfig config,
                                 std::shared_ptr<const checkpoint::HostTensors> weights) {
  config.validate();
  return [config, weights] { return make_transformer(config, weights); };
}

std::unique_ptr<nn::Module> make_transformer(
    nn::TransformerConfig config, std::shared_ptr<const checkpoint::HostTensors> weights) {
  config.validate();
  auto model = std::make_unique<nn::Transformer>(config);
  if (weights == nullptr) return model;
  // Every parameter the weights hold starts from them (replica 0's are broadcast anyway).
  for (Parameter* p : model->parameters()) {
    auto it = weights->find(p->name);
    if (it == weights->end()) continue;
    LS_CHECK(it->second.values.size() == static_cast<size_t>(p->numel()), "weights for ", p->name,
             " have ", it->second.values.size(), " values; the parameter is ",
             shape_str(p->shape));
    p->init = Init::from_values(std::make_shared<const std::vector<float>>(it->second.values));
  }
  return model;
}

}  // namespace ls
