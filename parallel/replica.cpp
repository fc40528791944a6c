// Replica (see parallel/replica.h).
#include "parallel/replica.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/core/runtime.h"
#include "engine/model/nn/functional.h"
#include "ops/elementwise.h"
#include "ops/softmax_xent.h"
#include "parallel/step_common.h"

namespace ls {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kIdle: return "idle";
    case Phase::kSetup: return "setup";
    case Phase::kUpload: return "upload";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kReduce: return "gradient all-reduce";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kEvaluate: return "evaluate";
  }
  return "?";
}

namespace {
thread_local int t_current_replica = -1;

// Where each parameter's gradient lies in the flat layout, padding included.
std::vector<ParameterExtent> parameter_extents(const nn::ParameterStore& store) {
  const auto& params = store.parameters();
  std::vector<ParameterExtent> extents;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t end = i + 1 < params.size() ? params[i + 1]->offset : store.values().numel();
    extents.push_back({params[i]->offset, end - params[i]->offset});
  }
  return extents;
}
}  // namespace

int current_replica() { return t_current_replica; }

Replica::Replica(int rank, Device device, const ModelFactory& model,
                 const OptimizerFactory& optimizer, std::unique_ptr<Communicator> comm,
                 RecordingCommunicator& recorder, const BucketOptions& buckets, uint64_t seed,
                 ShardMode shard)
    : rank_(rank), device_(device), comm_(std::move(comm)), recorder_(recorder) {
  t_current_replica = rank;
  DeviceRuntime& runtime = device_runtime(device);
  runtime.bind_current_thread();
  compute_ = runtime.create_stream();
  comm_stream_ = runtime.create_stream();
  step_start_ = runtime.create_event();
  model_ = model();
  LS_CHECK(model_ != nullptr, "the model factory returned no model");
  const CachingAllocator& allocator = runtime.allocator();
  const int shards = shard == ShardMode::kNone ? 1 : comm_->size();
  // One replica owns everything: staging would only add to the whole gradient it keeps anyway.
  const bool zero2 = shard == ShardMode::kGradients && comm_->size() > 1;
  store_ = std::make_unique<nn::ParameterStore>(
      *model_, device, *compute_, seed, shards,
      zero2 ? nn::ParameterStore::Gradients::kNone : nn::ParameterStore::Gradients::kFlat);
  state_bytes_.parameters = store_->values().nbytes();
  if (zero2) owned_grads_ = Tensor::empty({store_->shard_size()}, DType::kF32, device);
  state_bytes_.gradients = zero2 ? owned_grads_.nbytes() : store_->grads().nbytes();
  const int64_t before_optimizer = allocator.stats().bytes_in_use;
  optimizer_ = optimizer(optimizer_range(store_->values()), *compute_);
  state_bytes_.optimizer = allocator.stats().bytes_in_use - before_optimizer;
  LS_CHECK(optimizer_ != nullptr, "the optimizer factory returned no optimizer");
  if (zero2) {
    const GradientShard range{store_->values().numel(), store_->shard_size(), owned_grads_};
    reducer_ = std::make_unique<Reducer>(range, parameter_extents(*store_), *comm_, *compute_,
                                         *comm_stream_, buckets);
  } else {
    reducer_ = std::make_unique<Reducer>(store_->grads(), parameter_extents(*store_), *comm_,
                                         *compute_, *comm_stream_, buckets);
  }
  loss_sum_ = Tensor::empty({2}, DType::kF32, device);
  nonfinite_ = Tensor::empty({1}, DType::kI32, device);
  compute_->synchronize();
  phase_ = Phase::kIdle;
}

Replica::~Replica() { drain(); }

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

void Replica::abort() {
  if (comm_) comm_->abort();
  if (compute_) compute_->abort();
  if (comm_stream_) comm_stream_->abort();
}

void Replica::broadcast_parameters() {
  const Tensor& values = store_->values();
  comm_->label_next("initial parameters");
  comm_->broadcast(values.data(), values.data(), static_cast<size_t>(values.numel()), DType::kF32,
                   0, *compute_);
  compute_->synchronize();
}

Shard Shard::slice(int64_t begin, int64_t count) const {
  Shard out = *this;
  if (images != nullptr) out.images = images + begin * features;
  if (tokens != nullptr) out.tokens = tokens + begin * features;
  out.labels = labels + begin * label_width;
  out.rows = count;
  out.first_row = first_row + begin;
  return out;
}

int64_t Shard::counted_labels() const {
  int64_t n = 0;
  for (int64_t i = 0; i < rows * label_width; ++i) n += labels[i] != kIgnoreLabel ? 1 : 0;
  return n;
}

void Replica::upload(const Shard& shard) {
  phase_ = Phase::kUpload;
  upload_shard(shard, /*with_labels=*/true, device_, inputs_, labels_, *compute_);
}

Var Replica::input_rows(Tape& tape, const Shard& shard, int64_t begin, int64_t end) const {
  return tape.constant(inputs_.view(begin * shard.features, {end - begin, shard.features}));
}

void Replica::forward_backward(const Shard& shard, int64_t global_labels, int accumulate,
                               const ForwardContext& context) {
  Stream& stream = *compute_;
  const float grad_scale = 1.0f / static_cast<float>(global_labels);
  for (int m = 0; m < accumulate; ++m) {
    // Near-equal micro-batches: the later ones get the extra rows.
    const int64_t begin = shard.rows * m / accumulate;
    const int64_t end = shard.rows * (m + 1) / accumulate;
    Tensor y = labels_.view(begin * shard.label_width, {(end - begin) * shard.label_width});
    phase_ = Phase::kForward;
    Tape tape(stream);
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
    Var logits = model_->forward(tape, input_rows(tape, shard, begin, end));
    Var loss = nn::cross_entropy(tape, logits, y, grad_scale);
    // The loss is (sum over counted labels) / (logit rows): back to the sum.
    axpy(static_cast<float>(logits->value.dim(0)), loss->value, loss_sum_.view(0, {1}), stream);
    phase_ = Phase::kBackward;
    tape.backward(loss);
    if (reduce) {
      phase_ = Phase::kReduce;
      reducer_->finish();
    }
  }
}

StepOutcome Replica::step(const Shard& shard, int64_t global_labels, int accumulate,
                          int64_t step_index, uint64_t dropout_seed) {
  LS_ASSERT(shard.rows >= accumulate && accumulate >= 1 && global_labels > 0);
  Stream& stream = *compute_;
  upload(shard);
  stream.record(*step_start_);
  store_->zero_grad(stream);
  fill(loss_sum_, 0.0f, stream);
  forward_backward(shard, global_labels, accumulate,
                   ForwardContext{true, dropout_seed, step_index, shard.first_row});

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
    count_nonfinite(store_->grads(), nonfinite_, stream);
    nonfinite_.copy_to_host_async(&nonfinite_host_, sizeof nonfinite_host_, stream);
  }
  loss_sum_.copy_to_host_async(loss_sum_host_, sizeof loss_sum_host_, stream);
  stream.synchronize();
  // A count past 2^31 saturates; as a float it is exact below 2^24 and never 0 when it is not.
  const int32_t nonfinite =
      gradients_sharded() ? static_cast<int32_t>(std::min(loss_sum_host_[1], 2.0e9f))
                          : nonfinite_host_;

  StepOutcome outcome{loss_sum_host_[0], nonfinite, false};
  // Identical inputs on every replica (summed gradients, global loss): an identical decision.
  outcome.skipped = nonfinite != 0 || !std::isfinite(loss_sum_host_[0]);
  if (!outcome.skipped) {
    phase_ = Phase::kOptimizer;
    const Tensor grads = gradients_sharded() ? owned_grads_ : optimizer_range(store_->grads());
    optimizer_->step(optimizer_range(store_->values()), grads, stream);
    if (sharded()) {  // every replica gets every updated range (in place: NCCL's layout)
      const Tensor mine = optimizer_range(store_->values());
      comm_->label_next("updated parameters");
      comm_->all_gather(mine.data(), store_->values().data(), static_cast<size_t>(mine.numel()),
                        DType::kF32, stream);
    }
    stream.synchronize();
  }
  phase_ = Phase::kIdle;
  return outcome;
}

EvalCounts Replica::evaluate(const Shard& rows, int64_t batch_size) {
  phase_ = Phase::kEvaluate;
  Stream& stream = *compute_;
  Tensor correct = Tensor::empty({1}, DType::kI32, device_);
  EvalCounts counts;
  for (int64_t begin = 0; begin < rows.rows; begin += batch_size) {
    const Shard batch = rows.slice(begin, std::min(batch_size, rows.rows - begin));
    const int64_t counted = batch.counted_labels();
    if (counted == 0) continue;
    upload(batch);
    Tape tape(stream, /*record=*/false);
    Var logits = model_->forward(tape, input_rows(tape, batch, 0, batch.rows));
    Var loss = nn::cross_entropy(tape, logits, labels_);
    count_correct(logits->value, labels_, correct, stream);
    int32_t correct_host = 0;
    float loss_host = 0;
    correct.copy_to_host_async(&correct_host, sizeof correct_host, stream);
    loss->value.copy_to_host_async(&loss_host, sizeof loss_host, stream);
    stream.synchronize();
    counts.correct += correct_host;
    // The loss is (sum over counted labels) / (logit rows).
    counts.loss_sum += static_cast<double>(loss_host) * static_cast<double>(logits->value.dim(0));
    counts.rows += counted;
  }
  phase_ = Phase::kIdle;
  return counts;
}

}  // namespace ls
