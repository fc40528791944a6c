// A model written the way an application writes one: a Module subclass using only the public
// headers (<lockstep/...>), with matrix products, batched products, reshapes, layernorm, GELU,
// tanh and a residual add. Its gradients match finite differences, and it trains under
// DataParallel on 1, 2 and 4 host devices (also with ZeRO-2 and accumulation) with the losses of
// one device, as the built-in models do.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include <lockstep/lockstep.h>
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "tests/nn/finite_differences.h"

namespace {

using ls::Init;
using ls::Parameter;
using ls::Tape;
using ls::Var;

// x [rows, 6] -> logits [rows, 3]. Each row's features are projected to a 2x4 and a 4x2 matrix
// whose product (a batched matmul, one 2x2 per row) is normalised and mixed back with a tanh
// skip path.
class PairMixer final : public ls::nn::Module {
 public:
  static constexpr int64_t kIn = 6, kClasses = 3;

  PairMixer()
      : left_(register_module("left", std::make_unique<ls::nn::Linear>(kIn, 8))),
        right_(register_module("right", std::make_unique<ls::nn::Linear>(kIn, 8))),
        gamma_(register_parameter("norm_gamma", {4}, Init::ones())),
        beta_(register_parameter("norm_beta", {4}, Init::zeros())),
        mix_(register_parameter("mix", {4, kClasses}, Init::uniform(0.5f))),
        skip_(register_parameter("skip", {kIn, kClasses}, Init::uniform(0.4f))) {}

  Var forward(Tape& tape, const Var& x) override {
    const int64_t rows = x->value.dim(0);
    Var a = ls::nn::reshape(tape, ls::nn::gelu(tape, left_.forward(tape, x)), {rows, 2, 4});
    Var b = ls::nn::reshape(tape, right_.forward(tape, x), {rows, 4, 2});
    Var pairs = ls::nn::reshape(tape, ls::nn::batched_matmul(tape, a, b), {rows, 4});
    Var normed = ls::nn::layernorm(tape, pairs, tape.parameter(gamma_), tape.parameter(beta_),
                                   1e-5f);
    Var mixed = ls::nn::matmul(tape, normed, tape.parameter(mix_));
    Var skip = ls::nn::matmul(tape, ls::nn::tanh(tape, x), tape.parameter(skip_));
    return ls::nn::add(tape, mixed, skip);
  }

  // Two layers for a pipeline: the pair product, then the skip path, which reads the model's
  // input (each layer gets it) rather than the previous layer's output.
  std::vector<ls::nn::PipelineLayer> pipeline_layers() override {
    const std::vector<Parameter*> all = parameters();
    std::vector<Parameter*> pair_parameters = ls::nn::parameters_under(all, "left.");
    for (Parameter* p : ls::nn::parameters_under(all, "right.")) pair_parameters.push_back(p);
    pair_parameters.insert(pair_parameters.end(), {&gamma_, &beta_, &mix_});
    return {{"pairs",
             pair_parameters,
             [this](Tape& tape, const Var& x, const Var&) {
               const int64_t rows = x->value.dim(0);
               Var a = ls::nn::reshape(tape, ls::nn::gelu(tape, left_.forward(tape, x)),
                                       {rows, 2, 4});
               Var b = ls::nn::reshape(tape, right_.forward(tape, x), {rows, 4, 2});
               Var pairs = ls::nn::reshape(tape, ls::nn::batched_matmul(tape, a, b), {rows, 4});
               Var normed = ls::nn::layernorm(tape, pairs, tape.parameter(gamma_),
                                              tape.parameter(beta_), 1e-5f);
               return ls::nn::matmul(tape, normed, tape.parameter(mix_));
             }},
            {"skip",
             {&skip_},
             [this](Tape& tape, const Var& mixed, const Var& input) {
               Var skip = ls::nn::matmul(tape, ls::nn::tanh(tape, input), tape.parameter(skip_));
               return ls::nn::add(tape, mixed, skip);
             }}};
  }

 private:
  ls::nn::Linear& left_;
  ls::nn::Linear& right_;
  Parameter& gamma_;
  Parameter& beta_;
  Parameter& mix_;
  Parameter& skip_;
};

ls::data::Batch make_batch(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  ls::data::Batch batch;
  batch.size = rows;
  batch.features = PairMixer::kIn;
  for (int64_t i = 0; i < rows * PairMixer::kIn; ++i) batch.images.push_back(normal(rng));
  for (int64_t i = 0; i < rows; ++i) {
    batch.labels.push_back(static_cast<int32_t>(rng() % PairMixer::kClasses));
  }
  return batch;
}

ls::ModelFactory pair_mixer() {
  return [] { return std::make_unique<PairMixer>(); };
}

std::vector<float> losses(const std::string& devices, ls::DataParallelOptions options,
                          int steps) {
  ls::DataParallel trainer(ls::parse_devices(devices), pair_mixer(),
                           ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}), options);
  const ls::data::Batch batch = make_batch(16, 5);
  std::vector<float> out;
  for (int s = 0; s < steps; ++s) out.push_back(trainer.step(batch).loss);
  return out;
}

TEST(CustomModule, DeclaresItsParametersAndChildren) {
  PairMixer model;
  std::vector<std::string> names;
  for (Parameter* p : model.parameters()) names.push_back(p->name);
  // Its own parameters first, then each child's under the child's name.
  EXPECT_EQ(names, (std::vector<std::string>{"norm_gamma", "norm_beta", "mix", "skip",
                                             "left.weight", "left.bias", "right.weight",
                                             "right.bias"}));
  EXPECT_EQ(model.parameter_count(), 2 * (8 * 6 + 8) + 4 + 4 + 4 * 3 + 6 * 3);
}

// The loss of the model on one fixed batch as a function of every parameter: the tape's gradient
// against central finite differences. (The harness places the model as the engine does, with the
// internal ParameterStore; the model itself uses public headers only.)
float loss_of(PairMixer& model, ls::nn::ParameterStore& store, const ls::data::Batch& batch,
              ls::Stream& stream, bool record) {
  const ls::Device host{ls::DeviceKind::kHost, 0};
  ls::Tensor x = ls::Tensor::from_host(batch.images, {batch.size, PairMixer::kIn}, host, stream);
  ls::Tensor y = ls::Tensor::from_host_i32(batch.labels, {batch.size}, host, stream);
  Tape tape(stream, record);
  Var loss = ls::nn::cross_entropy(tape, model.forward(tape, tape.constant(x)), y);
  if (record) {
    store.zero_grad(stream);
    tape.backward(loss);
  }
  return loss->value.to_host_f32(stream)[0];
}

TEST(CustomModule, GradientsMatchFiniteDifferences) {
  const ls::Device host{ls::DeviceKind::kHost, 0};
  auto stream = ls::device_runtime(host).create_stream();
  PairMixer model;
  ls::nn::ParameterStore store(model, host, *stream, 3);
  const ls::data::Batch batch = make_batch(5, 9);
  loss_of(model, store, batch, *stream, true);
  const int64_t checked = ls::test::expect_gradients_match_finite_differences(store, *stream, [&] {
    return static_cast<double>(loss_of(model, store, batch, *stream, false));
  });
  EXPECT_EQ(checked, model.parameter_count());
}

void expect_same_losses(const std::vector<float>& reference, const std::vector<float>& other,
                        const std::string& what) {
  ASSERT_EQ(reference.size(), other.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    EXPECT_NEAR(other[s], reference[s], 1e-5 * std::abs(reference[s]))
        << what << ", step " << s;
  }
}

TEST(CustomModule, TrainsOnSeveralDevicesAsOnOne) {
  const int steps = 20;
  const std::vector<float> one = losses("host:1", {}, steps);
  EXPECT_LT(one.back(), 0.8f * one.front()) << "it did not learn";
  expect_same_losses(one, losses("host:2", {}, steps), "host:2");
  expect_same_losses(one, losses("host:4", {}, steps), "host:4");
  ls::DataParallelOptions zero2;
  zero2.shard = ls::ShardMode::kGradients;
  zero2.accumulate = 2;
  expect_same_losses(one, losses("host:4", zero2, steps), "host:4, ZeRO-2, accumulate 2");
}

}  // namespace

namespace {

// bf16 matrix products and steps as graphs: 2 replicas track one within the bf16 tolerance the
// built-in models meet (tests/parallel/precision_training_test.cpp: 1e-3 relative).
TEST(CustomModule, TrainsInBf16WithGraphsOnTwoDevicesAsOnOne) {
  ls::DataParallelOptions options;
  options.precision = ls::Precision::kBF16;
  options.graphs = true;
  const std::vector<float> one = losses("host:1", options, 20);
  const std::vector<float> two = losses("host:2", options, 20);
  for (size_t s = 0; s < one.size(); ++s) {
    EXPECT_NEAR(two[s], one[s], 1e-3 * std::abs(one[s])) << "step " << s;
  }
  EXPECT_LT(one.back(), 0.8f * one.front()) << "it did not learn in bf16";
}

// A checkpoint of the custom model resumes into exactly the uninterrupted run.
TEST(CustomModule, ResumesFromACheckpointAsIfNeverStopped) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("lockstep_custom_module_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto make = [] {
    return std::make_unique<ls::DataParallel>(
        ls::parse_devices("host:2"), pair_mixer(),
        ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}));
  };
  const ls::data::Batch batch = make_batch(16, 5);
  std::vector<float> straight, resumed;
  {
    auto trainer = make();
    for (int s = 0; s < 6; ++s) {
      straight.push_back(trainer->step(batch).loss);
    }
  }
  {
    auto trainer = make();
    for (int s = 0; s < 3; ++s) resumed.push_back(trainer->step(batch).loss);
    trainer->save(dir.string(), {0, 3});
  }
  {
    auto trainer = make();
    trainer->load(dir.string());
    for (int s = 3; s < 6; ++s) resumed.push_back(trainer->step(batch).loss);
  }
  std::filesystem::remove_all(dir);
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t s = 0; s < straight.size(); ++s) EXPECT_EQ(resumed[s], straight[s]) << "step " << s;
}

// Listed as two layers, the model trains as a 2-stage pipeline of 4 micro-batches as on one
// device (the micro-batch sums round differently: within 1e-5).
TEST(CustomModule, TrainsAsATwoStagePipelineWhenItListsItsLayers) {
  ls::PipelineOptions options;
  options.stages = 2;
  options.micro_batches = 4;
  ls::Pipeline pipeline(ls::parse_devices("host:2"), pair_mixer(),
                        ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}), options);
  const ls::data::Batch batch = make_batch(16, 5);
  std::vector<float> staged;
  for (int s = 0; s < 20; ++s) staged.push_back(pipeline.step(batch).loss);
  expect_same_losses(losses("host:1", {}, 20), staged, "2-stage pipeline");
}

}  // namespace
