// PipelineStage (see parallel/pipeline/pipeline_stage.h).
//
// Note [Pipeline transfer lifetime]
// A tensor posted to a neighbour is read by the neighbour's stream (its copy) at a time this
// stage does not see. So the sender keeps every tensor it posts in keep_alive_ until step(), which
// the Pipeline runs only after every stage's run() has synchronized its stream, when every copy
// has run. Order across the two streams is by events: the receiver's stream waits on the event
// the sender recorded after producing the tensor; a tied-gradient sum overwrites the stage's own
// gradient only after waiting on the event each peer recorded after copying it.
#include "parallel/pipeline/pipeline_stage.h"

#include "ops/step_control.h"
#include "parallel/observability/device_clock.h"

#include <cmath>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/nn/functional.h>
#include "ops/elementwise.h"
#include "ops/softmax_xent.h"
#include "parallel/runtime/step_common.h"

namespace ls {

// Note [Evaluation window]
// Evaluation streams a whole data set through the stages, so a sender cannot keep every chunk's
// activations until the end (as a step keeps its micro-batches', Note [Pipeline transfer
// lifetime]). The receiver, after enqueueing its copy of chunk c, records an event and posts it
// back (kEvalCopied); the sender, after sending chunk c, takes chunk c - kEvalWindow's
// confirmation, makes its stream wait on it and only then lets that tensor go. So at most
// kEvalWindow + 1 chunks per stage are in flight, and each event slot (c mod kEvalWindow + 1)
// is recorded again only after the sender has waited on its previous use.
constexpr int kEvalWindow = 2;

namespace {

// The backward action: whole, or only its input gradient (B) where the schedule splits backward.
void run_backward(Tape& tape, const Var& root, const Tensor& root_grad, bool input_only) {
  if (input_only) {
    tape.backward_input(root, root_grad);
  } else {
    tape.backward(root, root_grad);
  }
}

// What an optimizer step changes: the parameters and the optimizer's state.
std::vector<Tensor> stepped_state(nn::ParameterStore& store, const optim::Optimizer& optimizer) {
  std::vector<Tensor> state{store.values()};
  for (const auto& [name, tensor] : optimizer.state()) state.push_back(tensor);
  return state;
}

}  // namespace

const char* stage_phase_name(StagePhase phase) {
  switch (phase) {
    case StagePhase::kIdle: return "idle";
    case StagePhase::kSetup: return "setup";
    case StagePhase::kUpload: return "upload";
    case StagePhase::kReceiveActivation: return "receive activations";
    case StagePhase::kForward: return "forward";
    case StagePhase::kSendActivation: return "send activations";
    case StagePhase::kReceiveGradient: return "receive gradient";
    case StagePhase::kBackward: return "backward";
    case StagePhase::kSendGradient: return "send gradient";
    case StagePhase::kWeightGradient: return "weight gradient";
    case StagePhase::kTiedGradients: return "tied-gradient sum";
    case StagePhase::kReduce: return "gradient all-reduce";
    case StagePhase::kSynchronize: return "synchronize";
    case StagePhase::kOptimizer: return "optimizer";
    case StagePhase::kEvaluate: return "evaluate";
  }
  return "?";
}

struct PipelineStage::MicroBatch {
  int index = 0;
  int64_t begin = 0, end = 0;  // rows of the stage's shard
  std::unique_ptr<Tape> tape;
  Var input;   // received activations (stages after the first)
  Var output;  // activations, or logits on the last stage
  Var loss;    // last stage
};

PipelineStage::PipelineStage(const StageConfig& config, Device device, const ModelFactory& model,
                             const OptimizerFactory& optimizer,
                             std::unique_ptr<Communicator> dp_comm)
    : config_(config), device_(device), dp_comm_(std::move(dp_comm)) {
  DeviceRuntime& runtime = device_runtime(device);
  runtime.bind_current_thread();
  // Activations, gradients and tied parameters are copied from the other stages' memory.
  for (const Device& peer : config_.pipeline) runtime.enable_peer_access(peer);
  compute_ = runtime.create_stream();
  model_ = model();
  LS_CHECK(model_ != nullptr, "the model factory returned no model");
  std::vector<nn::PipelineLayer> all_layers = model_->pipeline_layers();
  LS_ASSERT(config_.end_layer <= static_cast<int>(all_layers.size()) &&
            config_.first_layer < config_.end_layer);
  layers_.assign(all_layers.begin() + config_.first_layer, all_layers.begin() + config_.end_layer);
  build_parameters(*model_, layers_);
  optimizer_ = optimizer(store_->values(), *compute_);
  LS_CHECK(optimizer_ != nullptr, "the optimizer factory returned no optimizer");
  const int actions = (splits_backward(config_.schedule) ? 3 : 2) * config_.micro_batches;
  for (auto* events : {&action_start_, &action_end_}) {
    for (int k = 0; k < actions; ++k) events->push_back(runtime.create_event());  // timed
  }
  // One per micro-batch's activations and one per its input gradient.
  for (int k = 0; k < 2 * config_.micro_batches; ++k) sent_.push_back(runtime.create_sync_event());
  tied_ready_ = runtime.create_sync_event();
  tied_copied_ = runtime.create_sync_event();
  for (int k = 0; k < kEvalWindow + 1; ++k) {
    eval_sent_.push_back(runtime.create_sync_event());
    eval_copied_.push_back(runtime.create_sync_event());
  }
  loss_sum_ = Tensor::empty({1}, DType::kF32, device);
  nonfinite_ = Tensor::empty({1}, DType::kI32, device);
  loss_seed_ = Tensor::empty({1}, DType::kF32, device);
  marks_ = Tensor::empty({12}, DType::kI32, device);
  step_ref_ = runtime.create_event();  // timed
  clock_offset_ns_ = device_clock_offset_ns(device, *compute_);
  compute_->synchronize();
  phase_ = StagePhase::kIdle;
}

PipelineStage::~PipelineStage() {
  micro_.clear();
  drain();
}

void PipelineStage::build_parameters(nn::Module& model,
                                     const std::vector<nn::PipelineLayer>& layers) {
  // The whole model's initial values, drawn in registration order as a single-device
  // ParameterStore draws them; this stage's parameters start from their slices.
  const std::vector<Parameter*> all = model.parameters();
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (Parameter* p : all) {
    p->offset = total;
    offsets.push_back(total);
    total += p->numel();
  }
  const std::vector<float> values = nn::initial_values(all, total, config_.seed);
  std::vector<bool> used(all.size(), false);
  for (const nn::PipelineLayer& layer : layers) {
    for (Parameter* p : layer.parameters) {
      for (size_t i = 0; i < all.size(); ++i) used[i] = used[i] || all[i] == p;
    }
  }
  std::vector<Parameter*> mine;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!used[i]) continue;
    const auto begin = values.begin() + offsets[i];
    all[i]->init = Init::from_values(
        std::make_shared<const std::vector<float>>(begin, begin + all[i]->numel()));
    mine.push_back(all[i]);
    model_indices_.push_back(static_cast<int>(i));
  }
  LS_ASSERT(!mine.empty(), "stage ", config_.stage, " holds no parameter");
  store_ = std::make_unique<nn::ParameterStore>(mine, device_, *compute_, config_.seed);
}

void PipelineStage::connect(std::vector<StageInbox*> inboxes, std::vector<TiedParameter> tied) {
  inboxes_ = std::move(inboxes);
  tied_ = std::move(tied);
}

void PipelineStage::set_phase(StagePhase phase, int micro_batch) {
  phase_ = phase;
  micro_batch_ = micro_batch;
  ++ticks_;
}

bool PipelineStage::action_done(int k) const {
  return k < actions_enqueued() && action_end_[static_cast<size_t>(k)]->query();
}

void PipelineStage::abort() {
  inbox_.abort();
  if (dp_comm_) dp_comm_->abort();
  if (compute_) compute_->abort();
}

void PipelineStage::drain() {
  if (compute_ == nullptr) return;
  try {
    compute_->synchronize();
  } catch (...) {  // reported by the step that failed
  }
}

std::string PipelineStage::position() const {
  std::string out = stage_phase_name(phase());
  const int mb = micro_batch();
  if (mb >= 0) out += " of micro-batch " + std::to_string(mb);
  return out;
}

void PipelineStage::upload(const Shard& shard) {
  set_phase(StagePhase::kUpload, -1);
  upload_shard(shard, /*with_labels=*/last(), device_, inputs_, labels_, *compute_);
}

Tensor PipelineStage::receive(StageInbox::Key key, const std::string& what, Event* start) {
  StageMessage message = inbox_.take(key, wait_bound(), what);
  compute_->wait(*message.ready);
  if (start != nullptr) compute_->record(*start);  // busy from here: the input has arrived
  Tensor local = Tensor::empty(message.tensor.shape(), message.tensor.dtype(), device_);
  device_runtime(device_).copy_async(local.data(), message.tensor.data(), local.nbytes(),
                                     *compute_);
  return local;
}

void PipelineStage::send(StageInbox::Key key, int to, const Tensor& tensor, const Event& ready) {
  keep_alive_.push_back(tensor);  // See Note [Pipeline transfer lifetime]
  inboxes_[static_cast<size_t>(to)]->post(key, {tensor, &ready});
}

void PipelineStage::forward(MicroBatch& mb, int action) {
  const int s = config_.stage;
  const int64_t features = shard_.features;
  mb.tape = std::make_unique<Tape>(*compute_);
  ForwardContext context = context_;
  context.first_row = shard_.first_row + mb.begin;
  mb.tape->set_context(context);
  Var model_input =
      mb.tape->constant(inputs_.view(mb.begin * features, {mb.end - mb.begin, features}));
  Var x = model_input;
  Event& start = *action_start_[static_cast<size_t>(action)];
  if (s == 0) {
    compute_->record(start);
  } else {
    set_phase(StagePhase::kReceiveActivation, mb.index);
    mb.input = mb.tape->differentiable_input(
        receive({StageInbox::Kind::kActivation, mb.index, s - 1},
                "micro-batch " + std::to_string(mb.index) + "'s activations from stage " +
                    std::to_string(s - 1),
                &start));
    x = mb.input;
  }
  set_phase(StagePhase::kForward, mb.index);
  for (const nn::PipelineLayer& layer : layers_) x = layer.forward(*mb.tape, x, model_input);
  mb.output = x;
  if (last()) {
    const int64_t width = shard_.label_width;
    Tensor y = labels_.view(mb.begin * width, {(mb.end - mb.begin) * width});
    if (nn::is_cross_entropy(*config_.loss)) {  // gradient fused into its forward pass
      mb.loss = nn::cross_entropy(*mb.tape, x, y, 1.0f / static_cast<float>(global_labels_));
      // The loss is (sum over counted labels) / (logit rows): back to the sum.
      axpy(static_cast<float>(x->value.dim(0)), mb.loss->value, loss_sum_, *compute_);
    } else {  // a sum, seeded with 1 / global count in backward (Note [The loss contract])
      if (!loss_contract_checked_) {
        loss_contract_checked_ = true;
        if (config_.check_loss_contract) check_loss_contract(mb, x, y);
      }
      mb.loss = loss_sum_of(*config_.loss, *mb.tape, x, y, mb.end - mb.begin, width);
      axpy(1.0f, mb.loss->value, loss_sum_, *compute_);
    }
  }
  compute_->record(*action_end_[static_cast<size_t>(action)]);
  if (!last()) {
    set_phase(StagePhase::kSendActivation, mb.index);
    Event& sent = *sent_[static_cast<size_t>(mb.index)];
    compute_->record(sent);
    send({StageInbox::Kind::kActivation, mb.index, s}, s + 1, x->value, sent);
  }
}

void PipelineStage::check_loss_contract(const MicroBatch& mb, const Var& output,
                                        const Tensor& targets) {
  const int64_t rows = mb.end - mb.begin, half = rows / 2;
  const Tensor& out = output->value;
  if (half == 0 || out.ndim() == 0 || out.dim(0) % rows != 0) return;
  // The output's rows of example e are e * per_example .. (e + 1) * per_example (a token model's
  // [examples * seq, ...] included).
  const int64_t per_example = out.numel() / rows, out_rows = out.dim(0) / rows;
  const int64_t width = shard_.label_width;
  Shape shape = out.shape();
  auto sum_of = [&](int64_t begin, int64_t end) {
    Tape tape(*compute_, /*record=*/false);
    shape[0] = (end - begin) * out_rows;
    const Var part = tape.constant(out.view(begin * per_example, shape));
    Var sum = loss_sum_of(*config_.loss, tape, part,
                          targets.view(begin * width, {(end - begin) * width}), end - begin, width);
    float host = 0.0f;
    sum->value.copy_to_host_async(&host, sizeof host, *compute_);
    compute_->synchronize();
    return static_cast<double>(host);
  };
  check_loss_additive(*config_.loss, rows, half, sum_of(0, rows), sum_of(0, half),
                      sum_of(half, rows));
}

void PipelineStage::backward(MicroBatch& mb, int action) {
  const int s = config_.stage;
  Event& start = *action_start_[static_cast<size_t>(action)];
  if (last()) {
    compute_->record(start);
    set_phase(StagePhase::kBackward, mb.index);
    run_backward(*mb.tape, mb.loss, nn::is_cross_entropy(*config_.loss) ? Tensor() : loss_seed_,
                 splits_backward(config_.schedule));
  } else {
    set_phase(StagePhase::kReceiveGradient, mb.index);
    Tensor grad = receive({StageInbox::Kind::kGradient, mb.index, s + 1},
                          "micro-batch " + std::to_string(mb.index) + "'s gradient from stage " +
                              std::to_string(s + 1),
                          &start);
    set_phase(StagePhase::kBackward, mb.index);
    run_backward(*mb.tape, mb.output, grad, splits_backward(config_.schedule));
  }
  if (s > 0) {
    set_phase(StagePhase::kSendGradient, mb.index);
    Tensor dx = mb.input->grad;
    if (!dx.defined()) {  // nothing flowed into the input: its gradient is zero
      dx = Tensor::empty(mb.input->value.shape(), mb.input->value.dtype(), device_);
      fill(dx, 0.0f, *compute_);
    }
    Event& sent = *sent_[static_cast<size_t>(config_.micro_batches + mb.index)];
    compute_->record(sent);
    send({StageInbox::Kind::kGradient, mb.index, s}, s - 1, dx, sent);
  }
  compute_->record(*action_end_[static_cast<size_t>(action)]);
  if (splits_backward(config_.schedule)) {  // the tape keeps what its weight gradient needs
    mb.input = mb.output = mb.loss = nullptr;
    return;
  }
  mb = MicroBatch{};  // frees this micro-batch's activations (stream-ordered)
}

void PipelineStage::weight_gradient(MicroBatch& mb, int action) {
  compute_->record(*action_start_[static_cast<size_t>(action)]);
  set_phase(StagePhase::kWeightGradient, mb.index);
  mb.tape->backward_weights();
  compute_->record(*action_end_[static_cast<size_t>(action)]);
  mb = MicroBatch{};  // frees what was kept for it (stream-ordered)
}

void PipelineStage::sum_tied_gradients() {
  const int me = config_.stage;
  for (const TiedParameter& tied : tied_) {
    set_phase(StagePhase::kTiedGradients, -1);
    Parameter* p = nullptr;
    for (size_t j = 0; j < model_indices_.size(); ++j) {
      if (model_indices_[j] == tied.model_index) p = store_->parameters()[j];
    }
    LS_ASSERT(p != nullptr, "stage ", me, " does not hold tied parameter ", tied.model_index);
    compute_->record(*tied_ready_);
    for (int h : tied.holders) {
      if (h != me)
        send({StageInbox::Kind::kTiedGradient, tied.model_index, me}, h, p->grad, *tied_ready_);
    }
    std::vector<Tensor> parts;  // in stage order, so every holder sums alike (bitwise)
    for (int h : tied.holders) {
      parts.push_back(h == me ? p->grad
                              : receive({StageInbox::Kind::kTiedGradient, tied.model_index, h},
                                        "the gradient of tied parameter " + p->name +
                                            " from stage " + std::to_string(h),
                                        nullptr));
    }
    compute_->record(*tied_copied_);
    for (int h : tied.holders) {
      if (h != me)
        send({StageInbox::Kind::kTiedCopied, tied.model_index, me}, h, Tensor(), *tied_copied_);
    }
    Tensor sum = Tensor::empty(p->grad.shape(), DType::kF32, device_);
    add(parts[0], parts[1], sum, *compute_);
    for (size_t j = 2; j < parts.size(); ++j) add(sum, parts[j], sum, *compute_);
    for (int h : tied.holders) {  // every peer has copied our gradient before we overwrite it
      if (h == me) continue;
      StageMessage copied =
          inbox_.take({StageInbox::Kind::kTiedCopied, tied.model_index, h}, wait_bound(),
                      "stage " + std::to_string(h) + " to copy the gradient of " + p->name);
      compute_->wait(*copied.ready);
    }
    device_runtime(device_).copy_async(p->grad.data(), sum.data(), sum.nbytes(), *compute_);
    keep_alive_.push_back(sum);
    for (Tensor& t : parts) keep_alive_.push_back(t);
  }
}

void PipelineStage::reduce_data_parallel() {
  if (dp_comm_ == nullptr) return;
  set_phase(StagePhase::kReduce, -1);
  const Tensor& grads = store_->grads();
  dp_comm_->label_next("stage gradients");
  dp_comm_->all_reduce(grads.data(), grads.data(), static_cast<size_t>(grads.numel()), DType::kF32,
                       ReduceOp::kSum, *compute_);
}

StageOutcome PipelineStage::run(const Shard& shard, int64_t global_labels,
                                const std::vector<PipelineAction>& actions, int64_t step,
                                uint64_t dropout_seed) {
  const int m = config_.micro_batches;
  LS_ASSERT(shard.rows >= m &&
            static_cast<int>(actions.size()) == (splits_backward(config_.schedule) ? 3 : 2) * m);
  enqueued_.store(0, std::memory_order_release);
  shard_ = shard;
  global_labels_ = global_labels;
  context_ = ForwardContext{true, dropout_seed, step, 0, Precision::kF32, config_.recompute};
  stamp_device_clock(marks_, 0, *compute_);
  upload(shard);
  store_->zero_grad(*compute_);
  fill(loss_sum_, 0.0f, *compute_);
  if (last()) fill(loss_seed_, 1.0f / static_cast<float>(global_labels), *compute_);
  stamp_device_clock(marks_, 1, *compute_);
  compute_->record(*step_ref_);
  micro_.clear();
  micro_.resize(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) {  // near-equal micro-batches: the later ones get the extra rows
    micro_[static_cast<size_t>(i)].index = i;
    micro_[static_cast<size_t>(i)].begin = shard.rows * i / m;
    micro_[static_cast<size_t>(i)].end = shard.rows * (i + 1) / m;
  }
  for (size_t k = 0; k < actions.size(); ++k) {
    MicroBatch& mb = micro_[static_cast<size_t>(actions[k].micro_batch)];
    switch (actions[k].kind) {
      case PipelineAction::Kind::kForward: forward(mb, static_cast<int>(k)); break;
      case PipelineAction::Kind::kBackward: backward(mb, static_cast<int>(k)); break;
      case PipelineAction::Kind::kWeight: weight_gradient(mb, static_cast<int>(k)); break;
    }
    enqueued_.store(static_cast<int>(k + 1), std::memory_order_release);
  }
  // The data-parallel all-reduce first, the tied sum last: the holders of a tied parameter sit on
  // different stages, hence different communicators, whose sums NCCL need not order alike; the
  // tied sum adds the same copied inputs in stage order on every holder, so all copies of a tied
  // parameter stay bitwise equal whatever the backend.
  reduce_data_parallel();
  sum_tied_gradients();
  count_nonfinite(store_->grads(), nonfinite_, *compute_);
  stamp_device_clock(marks_, 2, *compute_);
  if (post_validates()) step_optimistically();
  const int stamps = post_validates() ? 5 : 3;
  marks_.view(0, {2 * stamps})
      .copy_to_host_async(marks_host_, static_cast<size_t>(stamps) * sizeof(int64_t), *compute_);
  loss_sum_.copy_to_host_async(&loss_sum_host_, sizeof loss_sum_host_, *compute_);
  nonfinite_.copy_to_host_async(&nonfinite_host_, sizeof nonfinite_host_, *compute_);
  set_phase(StagePhase::kSynchronize, -1);
  compute_->synchronize();
  StageOutcome outcome{last() ? loss_sum_host_ : 0.0, nonfinite_host_, 0.0, {}};
  StageTimeline& timeline = outcome.timeline;
  timeline.begin_ns = marks_host_[0];
  timeline.input_ns = marks_host_[1];
  timeline.actions_end_ns = marks_host_[2];
  // The actions' events, timed from step_ref_ (recorded with the input stamp).
  auto at = [&](const Event& e) {
    return timeline.input_ns + static_cast<int64_t>(e.elapsed_ms_since(*step_ref_) * 1e6);
  };
  for (size_t k = 0; k < actions.size(); ++k) {
    outcome.busy_ms += action_end_[k]->elapsed_ms_since(*action_start_[k]);
    timeline.actions.push_back({actions[k].kind, actions[k].micro_batch, at(*action_start_[k]),
                                at(*action_end_[k])});
  }
  if (post_validates()) optimistic_span_ = {marks_host_[3], marks_host_[4]};
  set_phase(StagePhase::kIdle, -1);
  return outcome;
}

void PipelineStage::evaluate_chunk(const Shard& chunk, int c, EvalCounts& counts) {
  const int s = config_.stage;
  const size_t slot = static_cast<size_t>(c % (kEvalWindow + 1));
  upload(chunk);
  set_phase(StagePhase::kEvaluate, c);
  Tape tape(*compute_, /*record=*/false);
  Var model_input = tape.constant(inputs_);
  Var x = model_input;
  if (s > 0) {
    const std::string what = "evaluation chunk " + std::to_string(c) +
                             "'s activations from stage " + std::to_string(s - 1);
    x = tape.constant(receive({StageInbox::Kind::kEvalActivation, c, s - 1}, what, nullptr));
    compute_->record(*eval_copied_[slot]);
    inboxes_[static_cast<size_t>(s - 1)]->post({StageInbox::Kind::kEvalCopied, c, s},
                                               {Tensor(), eval_copied_[slot].get()});
    set_phase(StagePhase::kEvaluate, c);
  }
  for (const nn::PipelineLayer& layer : layers_) x = layer.forward(tape, x, model_input);
  if (last()) {
    const ChunkLoss loss =
        evaluation_loss(*config_.loss, tape, x, labels_, chunk.rows, chunk.label_width);
    count_correct(x->value, labels_, nonfinite_, *compute_);  // nonfinite_ is free: i32 [1]
    int32_t correct = 0;
    float loss_value = 0;
    nonfinite_.copy_to_host_async(&correct, sizeof correct, *compute_);
    loss.value->value.copy_to_host_async(&loss_value, sizeof loss_value, *compute_);
    compute_->synchronize();
    counts.correct += correct;
    counts.loss_sum += static_cast<double>(loss_value) * loss.to_sum;
    counts.rows += chunk.counted_labels();
    return;
  }
  compute_->record(*eval_sent_[slot]);
  send({StageInbox::Kind::kEvalActivation, c, s}, s + 1, x->value, *eval_sent_[slot]);
  if (c >= kEvalWindow) {  // See Note [Evaluation window]
    StageMessage copied = inbox_.take({StageInbox::Kind::kEvalCopied, c - kEvalWindow, s + 1},
                                      wait_bound(), "stage " + std::to_string(s + 1) +
                                                        " to copy evaluation chunk " +
                                                        std::to_string(c - kEvalWindow));
    compute_->wait(*copied.ready);
    keep_alive_.erase(keep_alive_.begin());
  }
}

EvalCounts PipelineStage::evaluate(const Shard& rows, int64_t batch_size) {
  EvalCounts counts;
  int c = 0;
  for (int64_t begin = 0; begin < rows.rows; begin += batch_size) {
    const Shard chunk = rows.slice(begin, std::min(batch_size, rows.rows - begin));
    if (chunk.counted_labels() == 0) continue;  // every stage skips it alike
    evaluate_chunk(chunk, c++, counts);
  }
  // The last confirmations: the receiver has enqueued every copy once they are all taken.
  for (int k = std::max(0, c - kEvalWindow); k < c && !last(); ++k) {
    StageMessage copied =
        inbox_.take({StageInbox::Kind::kEvalCopied, k, config_.stage + 1}, wait_bound(),
                    "stage " + std::to_string(config_.stage + 1) + " to copy evaluation chunk " +
                        std::to_string(k));
    compute_->wait(*copied.ready);
  }
  compute_->synchronize();
  keep_alive_.clear();
  set_phase(StagePhase::kIdle, -1);
  return counts;
}

OptimizerSpan PipelineStage::step(bool apply) {
  if (post_validates()) {  // run() has stepped: keep it, or undo it
    stamp_device_clock(marks_, 5, *compute_);  // the verdict is here
    if (!apply) roll_back();
    marks_.view(10, {2}).copy_to_host_async(&marks_host_[5], sizeof(int64_t), *compute_);
    compute_->synchronize();
    keep_alive_.clear();  // every stage's run() has synchronized: every copy has run
    set_phase(StagePhase::kIdle, -1);
    OptimizerSpan span = optimistic_span_;
    span.validated_ns = marks_host_[5];
    return span;
  }
  stamp_device_clock(marks_, 3, *compute_);
  if (apply) {
    set_phase(StagePhase::kOptimizer, -1);
    optimizer_->step(store_->values(), store_->grads(), *compute_);
  }
  stamp_device_clock(marks_, 4, *compute_);
  marks_.view(6, {4}).copy_to_host_async(&marks_host_[3], 2 * sizeof(int64_t), *compute_);
  compute_->synchronize();
  keep_alive_.clear();  // every stage's run() has synchronized: every copy has run
  set_phase(StagePhase::kIdle, -1);
  return {marks_host_[3], marks_host_[4]};
}

// Note [Post-validation]
// Whether a step is skipped (a non-finite gradient or loss anywhere) is known only once every
// stage of every pipeline has finished its actions. Waiting for that before the optimizer is a
// barrier across the stages at the end of every step, which a zero-bubble schedule is built to
// avoid (Qi et al. 2023, section 4: "optimizer post-validation"). So under ZB-H1 each stage
// steps as soon as its own gradients are final, having copied its parameters and optimizer state
// (one device copy of them, and the memory for it); when the step turns out to be skipped,
// step(false) copies them back and the optimizer's step count goes back by one: the state is
// bitwise what a skipped step leaves.
void PipelineStage::step_optimistically() {
  stamp_device_clock(marks_, 3, *compute_);
  set_phase(StagePhase::kOptimizer, -1);
  const std::vector<Tensor> state = stepped_state(*store_, *optimizer_);
  if (before_step_.empty()) {
    for (const Tensor& t : state) {
      before_step_.push_back(Tensor::empty(t.shape(), t.dtype(), device_));
    }
  }
  for (size_t k = 0; k < state.size(); ++k) before_step_[k].copy_from(state[k], *compute_);
  optimizer_->step(store_->values(), store_->grads(), *compute_);
  stamp_device_clock(marks_, 4, *compute_);
}

void PipelineStage::roll_back() {
  set_phase(StagePhase::kOptimizer, -1);
  const std::vector<Tensor> state = stepped_state(*store_, *optimizer_);
  for (size_t k = 0; k < state.size(); ++k) state[k].copy_from(before_step_[k], *compute_);
  optimizer_->set_steps_taken(optimizer_->steps_taken() - 1);
}

}  // namespace ls
