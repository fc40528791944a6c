// Replica (see parallel/data_parallel/replica.h).
#include "parallel/data_parallel/replica.h"

#include <chrono>
#include <cmath>
#include <cstddef>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/nn/functional.h>
#include "ops/elementwise.h"
#include "ops/softmax_xent.h"
#include "ops/step_control.h"
#include "parallel/observability/device_clock.h"
#include "parallel/runtime/step_common.h"

namespace ls {

namespace {
thread_local int t_current_replica = -1;

// Where each parameter's gradient lies in the flat layout, padding included.
std::vector<ParameterExtent> parameter_extents(const nn::ParameterStore& store) {
  const auto& params = store.parameters();
  std::vector<ParameterExtent> extents;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t end = i + 1 < params.size() ? params[i + 1]->offset : store.flat_size();
    extents.push_back({params[i]->offset, end - params[i]->offset});
  }
  return extents;
}

// Makes `device` the calling thread's before any member touches it: the step's staging and
// outcome events are made in the initializer list, and an event made on a thread with no device
// bound lands on GPU 0 and makes a context there (Note [Bind before any device state]).
Device bound_to_this_thread(Device device) {
  device_runtime(device).bind_current_thread();
  return device;
}
}  // namespace

int current_replica() { return t_current_replica; }

Replica::Replica(int rank, Device device, const ModelFactory& model,
                 const OptimizerFactory& optimizer, std::unique_ptr<Communicator> comm,
                 RecordingCommunicator& recorder, const BucketOptions& buckets, uint64_t seed,
                 ShardMode shard, StepOptions step_options)
    : rank_(rank),
      device_(bound_to_this_thread(device)),
      step_options_(std::move(step_options)),
      recorder_(recorder),
      staging_(device) {
  auto graph_comm = std::make_unique<GraphAwareCommunicator>(std::move(comm));
  graph_comm_ = graph_comm.get();
  comm_ = std::move(graph_comm);
  t_current_replica = rank;
  DeviceRuntime& runtime = device_runtime(device);
  compute_ = runtime.create_stream();
  comm_stream_ = runtime.create_stream();
  step_start_ = runtime.create_event();
  model_ = model();
  LS_CHECK(model_ != nullptr, "the model factory returned no model");
  const CachingAllocator& allocator = runtime.allocator();
  const int shards = shard == ShardMode::kNone ? 1 : comm_->size();
  // One replica owns everything: staging would only add to the whole gradient it keeps anyway,
  // and there is nothing to gather.
  const bool zero3 = shard == ShardMode::kParameters && comm_->size() > 1;
  const bool zero2 = (shard == ShardMode::kGradients && comm_->size() > 1) || zero3;
  LS_CHECK_AS(ErrorKind::kUsage, !zero3 || step_options_.precision == Precision::kF32,
              "sharded parameters (ZeRO-3, --shard parameters) train in f32 only (16-bit products "
              "would need a sharded 16-bit copy of the weights, not built yet); use --shard "
              "gradients with ", precision_name(step_options_.precision), ", or f32");
  store_ = std::make_unique<nn::ParameterStore>(
      *model_, device, *compute_, seed, shards,
      zero2 ? nn::ParameterStore::Gradients::kNone : nn::ParameterStore::Gradients::kFlat,
      zero3 ? nn::ParameterStore::Values::range(rank) : nn::ParameterStore::Values::whole());
  // Note [The bf16 copy of the weights]: bf16 products multiply with the copy.
  if (step_options_.precision == Precision::kBF16 && step_options_.bf16_weight_copy) {
    store_->keep_bf16_copy(*compute_);
  }
  state_bytes_.parameters = store_->values().nbytes() + store_->values16().nbytes();
  if (zero2) owned_grads_ = Tensor::empty({store_->shard_size()}, DType::kF32, device);
  state_bytes_.gradients = zero2 ? owned_grads_.nbytes() : store_->grads().nbytes();
  const int64_t before_optimizer = allocator.stats().bytes_in_use;
  optimizer_ = optimizer(store_->owned_values(rank_), *compute_);
  state_bytes_.optimizer = allocator.stats().bytes_in_use - before_optimizer;
  LS_CHECK(optimizer_ != nullptr, "the optimizer factory returned no optimizer");
  if (zero2) {
    const GradientShard range{store_->flat_size(), store_->shard_size(), owned_grads_};
    reducer_ = std::make_unique<Reducer>(range, parameter_extents(*store_), *comm_, *compute_,
                                         *comm_stream_, buckets);
  } else {
    reducer_ = std::make_unique<Reducer>(store_->grads(), parameter_extents(*store_), *comm_,
                                         *compute_, *comm_stream_, buckets);
  }
  if (zero3) {
    gather_ = std::make_unique<ParameterGather>(*store_, *comm_, *compute_, *comm_stream_, runtime);
  }
  loss_sum_ = Tensor::empty({2}, DType::kF32, device);
  control_ = Tensor::empty({kStepControlWords}, DType::kI32, device);
  marks_ = Tensor::empty({kStepMarkWords}, DType::kI32, device);
  if (step_options_.trace_layers) layer_clock_ = std::make_unique<DeviceLayerClock>(device);
  outcomes_ = std::make_unique<StepOutcomes>(
      device, reducer_->launch_marks().numel(),
      layer_clock_ ? layer_clock_->marks().numel() : int64_t{0});
  clock_offset_ns_ = device_clock_offset_ns(device, *compute_);  // the trace's one time line
  // Only f16 scales the loss (lockstep/precision.h): its gradients underflow without it.
  const bool f16 = step_options_.precision == Precision::kF16;
  if (f16) check_loss_scale_config(step_options_.loss_scale);
  if (!f16) step_options_.loss_scale.dynamic = false;
  LS_CHECK(optimizer_->gated() || !f16,
           "f16 precision needs an optimizer that reads the step's "
           "loss scale on the device (gated(): lockstep's sgd and adamw); optimizer '",
           optimizer_->name(), "' does not; use bf16, or make it read its StepControl");
  if (!optimizer_->gated()) {
    graphs_possible_ = false;
    if (step_options_.graphs) {
      notice_once("steps run eagerly and wait for the device once: optimizer '" +
                  optimizer_->name() + "' does not read the step's decision on the device " +
                  "(Optimizer::gated()), so the host reads it first");
    }
  }
  if (gather_) {  // a gather allocates its tensor and records events: not in a graph
    graphs_possible_ = false;
    if (step_options_.graphs) {
      notice_once("steps run eagerly, not as graphs: sharded parameters (ZeRO-3) are gathered "
                  "into fresh memory as each layer needs them");
    }
  }
  optimizer_->set_step_control(control_);
  // Last, and waited for at once: nothing may throw while the copy still reads `initial`.
  StepControl initial{};
  initial.loss_scale = f16 ? step_options_.loss_scale.initial_scale : 1.0f;
  initial.labels = 1.0f;
  control_.copy_from_host_async(&initial, sizeof initial, *compute_);
  compute_->synchronize();
  phase_ = Phase::kIdle;
}

// Note [Graphs go before their communicator]
// A CUDA graph that captured NCCL collectives holds NCCL's persistent references on the
// communicator, and NCCL's teardown (and the end of ncclCommAbort) spins until every such graph
// is destroyed (NCCL src/init.cc, commDestroySync; pytorch#115388). So the graph goes first,
// explicitly, before the communicator and everything else; the NCCL clique's abort runs on a
// helper thread that is joined only when the last communicator goes (parallel/nccl/).
Replica::~Replica() {
  drain();
  graph_.reset();
}

void Replica::drain() {
  // Let queued work finish (or be skipped, after an abort) before what it uses goes away.
  for (Stream* s : {compute_.get(), comm_stream_.get()}) {
    if (s == nullptr) continue;
    try {
      s->synchronize();
    } catch (...) {  // already reported by the step that failed
    }
  }
}

// Streams first: their waits end at once. The communicator's abort never blocks either (the
// NCCL clique aborts on a helper thread), but a wait on a stream is what holds the replica's
// thread, and that thread must be free to destroy its graph (Note [Graphs go before their
// communicator]).
void Replica::abort() {
  if (compute_) compute_->abort();
  if (comm_stream_) comm_stream_->abort();
  if (comm_) comm_->abort();
}

void Replica::broadcast_parameters() {
  // Sharded parameters: each range lives on one replica only, so no two copies can differ.
  if (store_->values_sharded()) return;
  const Tensor& values = store_->values();
  comm_->label_next("initial parameters");
  comm_->broadcast(values.data(), values.data(), static_cast<size_t>(values.numel()), DType::kF32,
                   0, *compute_);
  store_->round_bf16_copy(*compute_);
  compute_->synchronize();
}

void Replica::upload(const Shard& shard) {  // evaluation: the caller's memory, then a sync
  phase_ = Phase::kUpload;
  upload_shard(shard, /*with_labels=*/true, device_, inputs_, labels_, *compute_);
}

nn::Inputs Replica::input_rows(Tape& tape, const Shard& shard, int64_t begin,
                              int64_t end) const {
  return inputs_of_rows(tape, inputs_, shard, begin, end);
}

// Note [A step the host never waits on]
// Everything a step decides is decided on the device (ops/step_control.h): the loss gradient's
// scale (loss scale / global labels, uploaded with the batch), whether to skip (the non-finite
// count of the summed gradients and the loss, all-reduced, so every replica decides alike), the
// optimizer's step count and the loss scale's schedule. The optimizer kernels read the decision,
// so the optimizer and the ZeRO all-gather are always enqueued and do nothing harmful on a skip
// (the all-gather spreads unchanged ranges). enqueue_step() therefore only enqueues: upload from
// host staging (parallel/data_parallel/step_io.h), the body, and the copy of the outcome (loss sum,
// count, StepControl) into a host ring slot. outcome() waits for that copy, bounded by a deadline.

void Replica::forward_backward(const Shard& shard, int accumulate, const ForwardContext& context) {
  Stream& stream = *compute_;
  // The loss gradient's scale is the StepControl's grad_seed (loss scale / global labels).
  const Tensor grad_seed = control_.view_as(DType::kF32, offsetof(StepControl, grad_seed) / 4, {1});
  for (int m = 0; m < accumulate; ++m) {
    // Near-equal micro-batches: the later ones get the extra rows.
    const int64_t begin = shard.rows * m / accumulate;
    const int64_t end = shard.rows * (m + 1) / accumulate;
    Tensor y = labels_.view(begin * shard.label_width, {(end - begin) * shard.label_width});
    phase_ = Phase::kForward;
    Tape tape(stream);
    tape.set_layer_clock(layer_clock_.get());
    ForwardContext micro = context;
    micro.first_row += begin;
    tape.set_context(micro);
    // Unsharded gradients are summed over micro-batches in the flat buffer and all-reduced after
    // the last one; sharded ones are reduced after each (Note [Sharded gradients]).
    const bool reduce = gradients_sharded() || m + 1 == accumulate;
    if (reduce) {
      reducer_->begin(/*accumulate=*/gradients_sharded() && m > 0);
      tape.set_grad_ready_hook([this](Parameter& p) { reducer_->on_grad_ready(p.index); });
    }
    if (gradients_sharded()) {
      tape.set_grad_storage(
          [this](Parameter& p) { return reducer_->gradient_storage(p.index, p.shape); });
    }
    if (gather_) {
      tape.set_parameter_source(gather_.get());
      gather_->begin_forward();
    }
    Var output = model_->forward(tape, input_rows(tape, shard, begin, end));
    const nn::Loss& loss = *step_options_.loss;
    if (nn::is_cross_entropy(loss)) {  // its gradient is fused into its forward pass
      Var mean = nn::cross_entropy(tape, output, y, 1.0f, grad_seed);
      // The loss is (sum over counted labels) / (logit rows): back to the sum.
      axpy(static_cast<float>(output->value.dim(0)), mean->value, loss_sum_.view(0, {1}), stream);
      phase_ = Phase::kBackward;
      tape.backward(mean);
    } else {  // Note [The loss contract]: a sum, seeded with loss scale / global count
      Var sum = loss_sum_of(loss, tape, output, y, end - begin, shard.label_width);
      axpy(1.0f, sum->value, loss_sum_.view(0, {1}), stream);
      phase_ = Phase::kBackward;
      tape.backward(sum, grad_seed);
    }
    if (gather_) gather_->finish();
    if (tape.step_dependent() && graphs_possible_) {
      graphs_possible_ = false;
      if (step_options_.graphs) {
        notice_once(
            "steps run eagerly, not as graphs: the model uses dropout, whose masks depend "
            "on the step number (set dropout to 0 to run steps as graphs)");
      }
    }
    if (reduce) {
      phase_ = Phase::kReduce;
      const bool last = m + 1 == accumulate;
      if (last) stamp_device_clock(marks_, kBackwardEnd, stream);
      reducer_->finish();
      if (last) stamp_device_clock(marks_, kGradientsReduced, stream);
    }
  }
}

// Note [The loss contract]
// A loss other than the fused cross-entropy returns the SUM of its terms over the rows it gets
// (lockstep/nn/loss.h); backward starts from the StepControl's grad_seed (loss scale / global
// count), so each replica's gradient is its share of the global mean's, as cross-entropy's is. A
// loss that breaks the contract (a mean, a batch statistic) would silently train N replicas
// differently from one; check_loss_contract() catches that at the first step.

// The contract, checked once on this replica's rows: sum(all rows) = sum(first half) + sum(second
// half), within 1e-4 relative (f32 sums of different lengths round differently). Evaluation
// tapes, dropout off; one wait on the stream (the first step is eager anyway).
void Replica::check_loss_contract(const Shard& shard, const ForwardContext& context) {
  if (shard.rows < 2) return;
  Stream& stream = *compute_;
  const nn::Loss& loss = *step_options_.loss;
  const int64_t half = shard.rows / 2;
  ForwardContext eval = context;
  eval.training = false;
  auto sum_of = [&](int64_t begin, int64_t end) {
    Tape tape(stream, /*record=*/false);
    tape.set_context(eval);
    Var output = model_->forward(tape, input_rows(tape, shard, begin, end));
    Tensor targets = labels_.view(begin * shard.label_width, {(end - begin) * shard.label_width});
    Var sum = loss_sum_of(loss, tape, output, targets, end - begin, shard.label_width);
    float host = 0.0f;
    sum->value.copy_to_host_async(&host, sizeof host, stream);
    stream.synchronize();
    return static_cast<double>(host);
  };
  const double whole = sum_of(0, shard.rows);
  check_loss_additive(loss, shard.rows, half, whole, sum_of(0, half), sum_of(half, shard.rows));
}

void Replica::step_body(const Shard& shard, int accumulate, const ForwardContext& context) {
  Stream& stream = *compute_;
  if (layer_clock_) layer_clock_->begin_step();
  store_->zero_grad(stream);
  fill(loss_sum_, 0.0f, stream);
  step_begin(control_, stream);
  forward_backward(shard, accumulate, context);

  phase_ = Phase::kReduce;
  // The loss sum rides on the compute stream, after the gradients (the same order everywhere);
  // ZeRO-2's non-finite count of each range rides with it, so all replicas see the total.
  if (gradients_sharded()) {
    count_nonfinite(owned_grads_, loss_sum_.view(1, {1}), stream);
    comm_->label_next("loss and non-finite count");
    comm_->all_reduce(loss_sum_.data(), loss_sum_.data(), 2, DType::kF32, ReduceOp::kSum, stream);
  } else {
    comm_->label_next("loss");
    comm_->all_reduce(loss_sum_.data(), loss_sum_.data(), 1, DType::kF32, ReduceOp::kSum, stream);
    count_nonfinite(store_->grads(), loss_sum_.view(1, {1}), stream);
  }
  // Identical inputs on every replica (summed gradients, global loss): an identical decision.
  step_decide(control_, loss_sum_, stream);
  phase_ = Phase::kOptimizer;
  const Tensor grads = gradients_sharded() ? owned_grads_ : optimizer_range(store_->grads());
  // The optimizer writes the bf16 copy of what it updates; ZeRO's all-gather brings the other
  // replicas' ranges, which are rounded after it (Note [The bf16 copy of the weights]).
  const Tensor copy = sharded() ? Tensor() : store_->values16();
  if (optimizer_->gated() || !read_control().skip) {  // an ungated optimizer: the host decides
    optimizer_->step_and_round(store_->owned_values(rank_), grads, copy, stream);
  }
  // Every replica gets every updated range (in place: NCCL's layout); sharded parameters stay
  // where they are, each range on its replica.
  if (sharded() && !store_->values_sharded()) {
    const Tensor mine = optimizer_range(store_->values());
    comm_->label_next("updated parameters");
    comm_->all_gather(mine.data(), store_->values().data(), static_cast<size_t>(mine.numel()),
                      DType::kF32, stream);
    store_->round_bf16_copy(stream);
  }
  update_loss_scale(control_, step_options_.loss_scale, stream);
  stamp_device_clock(marks_, kStepEnd, stream);
}

// Note [The step as a graph]
// A step's device work depends only on tensors whose addresses stay put (parameters, gradients,
// optimizer state, the StepControl, the uploaded inputs) and on host values fixed by the shape
// (sizes, the micro-batch split). So once a shape has run graph_warmup eager steps (which sizes
// the caching allocator and proves the step runs), the next step of that shape is captured
// (DeviceRuntime::begin_capture on the compute stream, with the comm stream joined) and every
// later step of that shape launches the graph: one call instead of the autograd, allocation,
// checks and dispatch of hundreds of ops. Launches compute exactly what eager steps compute
// (the same kernels on the same memory in the same order), so results are bitwise equal.
// Steps of another shape (an epoch's last partial batch) run eagerly with their own input
// tensors and leave the graph in place (said once); a step whose ops depend on the step number
// (dropout) never runs as a graph (said once).
// Every replica must decide alike: NCCL requires that a collective be captured on all ranks or on
// none, and a graph launch is collective for the ranks captured together. So the shape that
// decides is the global batch's (rows, features, label width, micro-batches), the same for every
// replica and process (a replica's own rows differ with uneven shards), and so is everything else
// the decision reads (warm-up counts, the model's dropout). A capture that fails is the step's
// failure, never a quiet fallback that only some replicas would take.

void Replica::notice_once(const std::string& message) {
  if (step_options_.notice) step_options_.notice(message);
}

// Captures the step into graph_ (nothing of it runs). Any error, the backend's or the step's
// own, fails the step.
void Replica::capture_body(const Shard& shard, int accumulate, const ForwardContext& context) {
  DeviceRuntime& runtime = device_runtime(device_);
  runtime.begin_capture(*compute_, {comm_stream_.get()});
  graph_comm_->set_capture(compute_.get());
  try {
    step_body(shard, accumulate, context);
  } catch (...) {
    graph_comm_->set_capture(nullptr);
    try {
      runtime.end_capture(*compute_);  // discarded
    } catch (...) {                    // the step's own error is the one to report
    }
    throw;
  }
  graph_comm_->set_capture(nullptr);
  graph_ = runtime.end_capture(*compute_);
}

void Replica::run_body(const GraphShape& shape, const Shard& shard, int accumulate,
                       const ForwardContext& context) {
  if (graph_ && shape == graph_shape_) {
    graph_->launch(*compute_);
    ++graph_launches_;
    return;
  }
  if (graph_ && !told_shape_change_) {
    told_shape_change_ = true;
    notice_once("a step of another shape (a global batch of " + std::to_string(shape.rows) +
                " rows, " + std::to_string(accumulate) + " micro-batch(es)) than the captured " +
                "graph's (" + std::to_string(graph_shape_.rows) + " rows) runs eagerly; said once");
  }
  const bool warm = shape == warm_shape_ && warm_steps_ >= step_options_.graph_warmup;
  if (!step_options_.graphs || !graphs_possible_ || graph_ || !warm) {
    if (shape != warm_shape_) warm_shape_ = shape, warm_steps_ = 0;
    ++warm_steps_;
    step_body(shard, accumulate, context);
    return;
  }
  try {  // the step's work is recorded, not run; the launch below runs it
    capture_body(shard, accumulate, context);
  } catch (const Error& e) {
    LS_THROW_AS(e.kind(), "capturing step ", context.step + 1, " as a graph failed: ", e.message(),
                " (run with graphs off: --no-graphs, DataParallelOptions::graphs)");
  }
  graph_shape_ = shape;
  graph_inputs_ = inputs_;  // the graph reads these: keep them for its shape
  graph_labels_ = labels_;
  graph_->launch(*compute_);
  ++graph_launches_;
}

void Replica::enqueue_step(const Shard& shard, int64_t global_rows, int64_t global_labels,
                           int accumulate, int64_t step_index, uint64_t dropout_seed) {
  LS_ASSERT(shard.rows >= accumulate && accumulate >= 1 && global_labels > 0);
  Stream& stream = *compute_;
  phase_ = Phase::kUpload;
  // See Note [The step as a graph]: the global shape decides, alike on every replica.
  const GraphShape shape{global_rows, shard.features, shard.label_width, accumulate,
                         shard.named != nullptr ? input_layout_key(*shard.named) : 0};
  if (graph_ && shape == graph_shape_) {  // the captured graph reads these tensors
    inputs_ = graph_inputs_;
    labels_ = graph_labels_;
  } else if (graph_ && inputs_.defined() && inputs_.data() == graph_inputs_.data()) {
    inputs_ = Tensor();  // another shape: its own tensors, the graph's stay as they are
    labels_ = Tensor();
  }
  const Tensor control_labels =
      control_.view_as(DType::kF32, offsetof(StepControl, labels) / 4, {1});
  stamp_device_clock(marks_, kStepBegin, stream);
  if (step_options_.before_upload) step_options_.before_upload(rank_);
  staging_.upload(shard, static_cast<float>(global_labels), inputs_, labels_, control_labels,
                  stream);
  ForwardContext context{true,          dropout_seed, step_index, shard.first_row,
                         step_options_.precision, step_options_.recompute};
  context.logits_in_bf16 =
      step_options_.precision == Precision::kBF16 && nn::is_cross_entropy(*step_options_.loss);
  if (!loss_contract_checked_) {  // once, eagerly, before any capture (Note [The loss contract])
    loss_contract_checked_ = true;
    if (step_options_.check_loss_contract && !nn::is_cross_entropy(*step_options_.loss)) {
      phase_ = Phase::kForward;
      const auto whole = whole_values();  // every replica checks its own rows: no gathers
      check_loss_contract(shard, context);
    }
  }
  stream.record(*step_start_);
  stamp_device_clock(marks_, kInputReady, stream);
  const int64_t launches = graph_launches_;
  run_body(shape, shard, accumulate, context);
  last_step_graph_ = graph_launches_ != launches;
  graph_step_[step_index % StepOutcomes::kSlots] = last_step_graph_;
  Tensor layer_marks;
  if (layer_clock_) {
    const int64_t stamps = static_cast<int64_t>(layer_clock_->points()->size());
    if (stamps > 0) layer_marks = layer_clock_->marks().view(0, {2 * stamps});
    slot_layer_points_[step_index % StepOutcomes::kSlots] = layer_clock_->points();
  }
  outcomes_->export_outcome(step_index, loss_sum_, control_, marks_, reducer_->launch_marks(),
                            layer_marks, stream);
  phase_ = Phase::kIdle;
}

StepOutcome Replica::outcome(int64_t step_index) {
  phase_ = Phase::kDevice;
  const ExportedOutcome out =
      outcomes_->wait(step_index, step_options_.outcome_deadline,
                     "replica " + std::to_string(rank_) + " on " + device_.str());
  StepOutcome outcome;
  outcome.global_loss_sum = out.loss_sum;
  // A count past 2^31 saturates; as a float it is exact below 2^24 and never 0 when it is not.
  outcome.nonfinite = static_cast<int32_t>(std::min(out.nonfinite, 2.0e9f));
  outcome.skipped = out.control.skip != 0;
  outcome.loss_scale = out.control.loss_scale;
  outcome.optimizer_steps = out.control.optimizer_steps;
  outcome.graph = graph_step_[step_index % StepOutcomes::kSlots];
  outcome.marks = out.marks;
  outcome.launch_ns = outcomes_->launch_marks(step_index);
  if (layer_clock_) {
    outcome.layer_ns = outcomes_->layer_marks(step_index);
    outcome.layer_points = slot_layer_points_[step_index % StepOutcomes::kSlots];
  }
  phase_ = Phase::kIdle;
  // A gated optimizer's steps are counted on the device; any other counts its own.
  if (optimizer_->gated()) optimizer_->set_steps_taken(out.control.optimizer_steps);
  return outcome;
}

// Through a member, not the stack: a synchronize that ends early (an aborted CUDA stream) may
// leave the copy to run after this frame is gone; the replica drains its streams before dying.
StepControl Replica::read_control() {
  control_.copy_to_host_async(&control_host_, sizeof control_host_, *compute_);
  compute_->synchronize();
  return control_host_;
}

void Replica::restore_control(int64_t optimizer_steps, float loss_scale, int32_t good_steps) {
  StepControl c = read_control();
  LS_CHECK(optimizer_steps >= 0 && optimizer_steps < (int64_t{1} << 31), "optimizer steps ",
           optimizer_steps, " do not fit the device's 32-bit step count");
  c.optimizer_steps = static_cast<int32_t>(optimizer_steps);
  if (step_options_.loss_scale.dynamic) {
    c.loss_scale = loss_scale;
    c.good_steps = good_steps;
  }
  control_host_ = c;
  control_.copy_from_host_async(&control_host_, sizeof control_host_, *compute_);
  compute_->synchronize();
  optimizer_->set_steps_taken(optimizer_steps);
}

std::unique_ptr<ParameterGather::WholeValues> Replica::whole_values() {
  if (!gather_) return nullptr;
  return std::make_unique<ParameterGather::WholeValues>(*store_, *comm_, *compute_);
}

EvalCounts Replica::evaluate(const Shard& rows, int64_t batch_size,
                             const EvalLockstep* lockstep) {
  phase_ = Phase::kEvaluate;
  Stream& stream = *compute_;
  LS_ASSERT(!gather_ || lockstep != nullptr, "ZeRO-3 evaluation needs its lockstep");
  Tensor correct = Tensor::empty({1}, DType::kI32, device_);
  EvalCounts counts;
  const int64_t own = (rows.rows + batch_size - 1) / batch_size;
  const int64_t forwards = gather_ ? lockstep->forwards : own;
  for (int64_t i = 0; i < forwards; ++i) {
    const int64_t begin = i * batch_size;
    const Shard batch =
        i < own ? rows.slice(begin, std::min(batch_size, rows.rows - begin)) : lockstep->filler;
    const int64_t counted = i < own ? batch.counted_labels() : 0;
    if (counted == 0 && !gather_) continue;  // nothing to count; ZeRO-3 runs it all the same
    upload(batch);
    Tape tape(stream, /*record=*/false);
    tape.set_context(ForwardContext{false, 0, 0, 0, step_options_.precision});
    if (gather_) {
      tape.set_parameter_source(gather_.get());
      gather_->begin_forward();
    }
    Var logits = model_->forward(tape, input_rows(tape, batch, 0, batch.rows));
    if (gather_) gather_->finish();
    if (counted == 0) continue;
    const ChunkLoss loss = evaluation_loss(*step_options_.loss, tape, logits, labels_, batch.rows,
                                           batch.label_width);
    count_correct(logits->value, labels_, correct, stream);
    int32_t correct_host = 0;
    float loss_host = 0;
    correct.copy_to_host_async(&correct_host, sizeof correct_host, stream);
    loss.value->value.copy_to_host_async(&loss_host, sizeof loss_host, stream);
    stream.synchronize();
    counts.correct += correct_host;
    counts.loss_sum += static_cast<double>(loss_host) * loss.to_sum;
    counts.rows += counted;
  }
  stream.synchronize();  // the filler's and the uncounted batches' uploads read caller memory
  phase_ = Phase::kIdle;
  return counts;
}

}  // namespace ls
