// Replica (see parallel/replica.h).
#include "parallel/replica.h"

#include "engine/error.h"
#include "engine/nn/functional.h"
#include "engine/runtime.h"
#include "ops/softmax_xent.h"

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

Replica::Replica(int rank, Device device, const ModelFactory& model,
                 const OptimizerFactory& optimizer, std::unique_ptr<Communicator> comm,
                 const BucketOptions& buckets, uint64_t seed)
    : rank_(rank), device_(device), comm_(std::move(comm)) {
  DeviceRuntime& runtime = device_runtime(device);
  runtime.bind_current_thread();
  compute_ = runtime.create_stream();
  comm_stream_ = runtime.create_stream();
  step_start_ = runtime.create_event();
  model_ = model();
  LS_CHECK(model_ != nullptr, "the model factory returned no model");
  store_ = std::make_unique<nn::ParameterStore>(*model_, device, *compute_, seed);
  optimizer_ = optimizer(*store_, *compute_);
  LS_CHECK(optimizer_ != nullptr, "the optimizer factory returned no optimizer");
  reducer_ = std::make_unique<Reducer>(*store_, *comm_, *compute_, *comm_stream_, buckets);
  compute_->synchronize();
  phase_ = Phase::kIdle;
}

Replica::~Replica() {
  // Let queued work finish (or be skipped, after an abort) before the tensors it uses go away.
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
  comm_->broadcast(values.data(), values.data(), static_cast<size_t>(values.numel()), DType::kF32,
                   0, *compute_);
  compute_->synchronize();
}

void Replica::upload(const Shard& shard) {
  phase_ = Phase::kUpload;
  if (!images_.defined() || images_.dim(0) != shard.rows || images_.dim(1) != shard.features) {
    images_ = Tensor::empty({shard.rows, shard.features}, DType::kF32, device_);
    labels_ = Tensor::empty({shard.rows}, DType::kI32, device_);
  }
  images_.copy_from_host_async(shard.images, images_.nbytes(), *compute_);
  labels_.copy_from_host_async(shard.labels, labels_.nbytes(), *compute_);
}

ShardResult Replica::step(const Shard& shard, int64_t global_rows, int accumulate) {
  LS_ASSERT(shard.rows >= accumulate && accumulate >= 1);
  upload(shard);
  Stream& stream = *compute_;
  stream.record(*step_start_);
  store_->zero_grad(stream);
  reducer_->begin();
  micro_losses_.resize(static_cast<size_t>(accumulate));
  const float grad_scale = 1.0f / static_cast<float>(global_rows);
  std::vector<int64_t> micro_rows;
  for (int m = 0; m < accumulate; ++m) {
    // Near-equal micro-batches: the first (rows % accumulate) get one row more.
    const int64_t begin = shard.rows * m / accumulate;
    const int64_t end = shard.rows * (m + 1) / accumulate;
    micro_rows.push_back(end - begin);
    Tensor x = images_.view(begin * shard.features, {end - begin, shard.features});
    Tensor y = labels_.view(begin, {end - begin});
    phase_ = Phase::kForward;
    Tape tape(stream);
    if (m + 1 == accumulate) {
      tape.set_grad_ready_hook([this](Parameter& p) { reducer_->on_grad_ready(p); });
    }
    Var loss = nn::cross_entropy(tape, model_->forward(tape, tape.constant(x)), y, grad_scale);
    phase_ = Phase::kBackward;
    tape.backward(loss);
    loss->value.copy_to_host_async(&micro_losses_[static_cast<size_t>(m)], sizeof(float), stream);
  }
  phase_ = Phase::kReduce;
  reducer_->finish();
  phase_ = Phase::kOptimizer;
  optimizer_->step(stream);
  stream.synchronize();
  phase_ = Phase::kIdle;
  ShardResult result;
  result.rows = shard.rows;
  for (int m = 0; m < accumulate; ++m) {
    result.loss_sum += static_cast<double>(micro_losses_[static_cast<size_t>(m)]) *
                       static_cast<double>(micro_rows[static_cast<size_t>(m)]);
  }
  return result;
}

EvalCounts Replica::evaluate(const Shard& rows, int64_t batch_size) {
  phase_ = Phase::kEvaluate;
  Stream& stream = *compute_;
  Tensor correct = Tensor::empty({1}, DType::kI32, device_);
  EvalCounts counts;
  for (int64_t begin = 0; begin < rows.rows; begin += batch_size) {
    const int64_t n = std::min(batch_size, rows.rows - begin);
    Shard batch{rows.images + begin * rows.features, rows.labels + begin, n, rows.features};
    upload(batch);
    Tape tape(stream, /*record=*/false);
    Var logits = model_->forward(tape, tape.constant(images_));
    Var loss = nn::cross_entropy(tape, logits, labels_);
    count_correct(logits->value, labels_, correct, stream);
    int32_t correct_host = 0;
    float loss_host = 0;
    correct.copy_to_host_async(&correct_host, sizeof correct_host, stream);
    loss->value.copy_to_host_async(&loss_host, sizeof loss_host, stream);
    stream.synchronize();
    counts.correct += correct_host;
    counts.loss_sum += static_cast<double>(loss_host) * static_cast<double>(n);
    counts.rows += n;
  }
  phase_ = Phase::kIdle;
  return counts;
}

}  // namespace ls
