// Trainer (see engine/trainer.h).
#include "engine/trainer.h"

#include <cmath>

#include "engine/error.h"
#include "engine/nn/functional.h"
#include "engine/runtime.h"
#include "ops/softmax_xent.h"

namespace ls {

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& spec,
                                                 nn::ParameterStore& store, Stream& stream) {
  if (spec.kind == "adamw") {
    AdamWConfig config;
    config.lr = spec.lr;
    config.weight_decay = spec.weight_decay;
    return std::make_unique<optim::AdamW>(store, config, stream);
  }
  if (spec.kind == "sgd") {
    SgdConfig config;
    config.lr = spec.lr;
    config.momentum = spec.momentum;
    config.weight_decay = spec.weight_decay;
    return std::make_unique<optim::Sgd>(store, config, stream);
  }
  LS_THROW("unknown optimizer '", spec.kind, "'; use adamw or sgd");
}

Trainer::Trainer(std::unique_ptr<nn::Module> model, const OptimizerSpec& optimizer, Device device,
                 uint64_t seed)
    : device_(device),
      stream_(device_runtime(device).create_stream()),
      model_(std::move(model)),
      store_(std::make_unique<nn::ParameterStore>(*model_, device, *stream_, seed)),
      optimizer_(make_optimizer(optimizer, *store_, *stream_)) {
  stream_->synchronize();
}

void Trainer::upload(const data::Batch& batch) {
  LS_CHECK(batch.size > 0, "empty batch");
  LS_CHECK(static_cast<int64_t>(batch.labels.size()) == batch.size &&
               batch.images.size() % static_cast<size_t>(batch.size) == 0,
           "malformed batch: ", batch.size, " examples, ", batch.labels.size(), " labels, ",
           batch.images.size(), " pixels");
  const int64_t features = static_cast<int64_t>(batch.images.size()) / batch.size;
  if (!images_.defined() || images_.dim(0) != batch.size || images_.dim(1) != features) {
    images_ = Tensor::empty({batch.size, features}, DType::kF32, device_);
    labels_ = Tensor::empty({batch.size}, DType::kI32, device_);
  }
  images_.copy_from_host_async(batch.images.data(), images_.nbytes(), *stream_);
  labels_.copy_from_host_async(batch.labels.data(), labels_.nbytes(), *stream_);
}

StepResult Trainer::step(const data::Batch& batch) {
  upload(batch);
  Stream& stream = *stream_;
  store_->zero_grad(stream);
  Tape tape(stream);
  Var logits = model_->forward(tape, tape.constant(images_));
  Var loss = nn::cross_entropy(tape, logits, labels_);
  tape.backward(loss);
  optimizer_->step(stream);
  loss->value.copy_to_host_async(&loss_host_, sizeof(float), stream);
  stream.synchronize();  // also keeps `batch` alive until its upload has run
  return {loss_host_};
}

EvalResult Trainer::evaluate(const data::Dataset& dataset, int64_t batch_size) {
  LS_CHECK(batch_size > 0, "evaluate: batch size must be positive, got ", batch_size);
  LS_CHECK(dataset.count > 0, "evaluate: the data set '", dataset.name, "' is empty");
  Stream& stream = *stream_;
  Tensor correct = Tensor::empty({1}, DType::kI32, device_);
  std::vector<int64_t> indices;
  data::Batch batch;
  EvalResult result;
  double loss_sum = 0.0;
  for (int64_t start = 0; start < dataset.count; start += batch_size) {
    const int64_t size = std::min(batch_size, dataset.count - start);
    indices.resize(static_cast<size_t>(size));
    for (int64_t i = 0; i < size; ++i) indices[static_cast<size_t>(i)] = start + i;
    data::gather_batch(dataset, indices, batch);
    upload(batch);
    Tape tape(stream, /*record=*/false);
    Var logits = model_->forward(tape, tape.constant(images_));
    Var loss = nn::cross_entropy(tape, logits, labels_);
    count_correct(logits->value, labels_, correct, stream);
    int32_t correct_host = 0;
    float loss_host = 0.0f;
    correct.copy_to_host_async(&correct_host, sizeof(int32_t), stream);
    loss->value.copy_to_host_async(&loss_host, sizeof(float), stream);
    stream.synchronize();
    result.accuracy += correct_host;
    loss_sum += static_cast<double>(loss_host) * static_cast<double>(size);
  }
  result.examples = dataset.count;
  result.accuracy /= static_cast<double>(dataset.count);
  result.loss = loss_sum / static_cast<double>(dataset.count);
  return result;
}

}  // namespace ls
