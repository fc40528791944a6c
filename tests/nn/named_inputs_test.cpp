// Named inputs (lockstep/data/named_input.h): a model with three inputs of three dtypes (f32
// features, i32 category ids, bf16 features) written against the public headers only, trained
// with a mean-squared-error loss. It trains on 1, 2 and 4 host devices, with accumulation and as
// graphs with the losses of one device, and every malformed batch or missing input is a clear
// error.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/lockstep.h>
#include "engine/core/runtime.h"  // cuda_availability

namespace {

using ls::Init;
using ls::Parameter;
using ls::Tape;
using ls::Var;
using ls::data::NamedInput;

constexpr int64_t kFeatures = 3, kCategories = 5, kWidth = 4;

// y = w . relu(W f + E[c] + V to_f32(g)) + b, from inputs "features" (f32 [3]), "category"
// (i32, one id) and "scaled" (bf16 [3]).
class PriceModel final : public ls::nn::Module {
 public:
  PriceModel()
      : features_(register_module("features", std::make_unique<ls::nn::Linear>(kFeatures, kWidth))),
        scaled_(register_module("scaled", std::make_unique<ls::nn::Linear>(kFeatures, kWidth))),
        head_(register_module("head", std::make_unique<ls::nn::Linear>(kWidth, 1))),
        categories_(register_parameter("categories", {kCategories, kWidth}, Init::uniform(0.5f))) {}

  Var forward(Tape& tape, const ls::nn::Inputs& inputs) override {
    Var hidden = features_.forward(tape, inputs["features"]);
    Var ids = inputs["category"];
    hidden = ls::nn::add(tape, hidden,
                         ls::nn::embedding(tape, tape.parameter(categories_), ids->value));
    hidden = ls::nn::add(tape, hidden,
                         scaled_.forward(tape, ls::nn::to_f32(tape, inputs["scaled"])));
    return head_.forward(tape, ls::nn::relu(tape, hidden));
  }

 private:
  ls::nn::Linear& features_;
  ls::nn::Linear& scaled_;
  ls::nn::Linear& head_;
  Parameter& categories_;
};

ls::ModelFactory price_model() {
  return [] { return std::make_unique<PriceModel>(); };
}

// `rows` examples with a target that depends on every input.
ls::data::Batch price_batch(int64_t rows, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> category(0, kCategories - 1);
  std::vector<float> features, targets;
  std::vector<int32_t> ids;
  std::vector<uint16_t> scaled;
  for (int64_t r = 0; r < rows; ++r) {
    float target = 0.0f;
    for (int64_t j = 0; j < kFeatures; ++j) {
      features.push_back(value(rng));
      target += features.back();
    }
    ids.push_back(category(rng));
    target += 0.25f * static_cast<float>(ids.back());
    for (int64_t j = 0; j < kFeatures; ++j) {
      scaled.push_back(ls::f32_to_bf16(value(rng)));
      target -= 0.5f * ls::bf16_to_f32(scaled.back());
    }
    targets.push_back(target);
  }
  ls::data::Batch batch;
  batch.size = rows;
  batch.inputs.push_back(NamedInput::f32("features", {kFeatures}, features));
  batch.inputs.push_back(NamedInput::i32("category", {}, ids));
  batch.inputs.push_back(NamedInput::bf16("scaled", {kFeatures}, scaled));
  batch.targets = targets;
  return batch;
}

ls::DataParallelOptions mse_options() {
  ls::DataParallelOptions options;
  options.loss = ls::nn::mse_loss();
  return options;
}

std::vector<ls::StepResult> train(const std::string& devices, ls::DataParallelOptions options,
                                  int steps = 8) {
  ls::DataParallel trainer(ls::parse_devices(devices), price_model(),
                           ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}), options);
  std::vector<ls::StepResult> results;
  for (int s = 0; s < steps; ++s) results.push_back(trainer.step(price_batch(16, 100 + s % 3)));
  return results;
}

void expect_close_losses(const std::vector<ls::StepResult>& got,
                         const std::vector<ls::StepResult>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    EXPECT_NEAR(got[s].loss, want[s].loss, tolerance * std::abs(want[s].loss)) << "step " << s;
  }
}

void expect_error(const std::function<void()>& run, const std::string& words) {
  try {
    run();
    FAIL() << "expected an ls::Error containing: " << words;
  } catch (const ls::Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(NamedInputs, AThreeInputModelTrainsOnSeveralDevicesAsOnOne) {
  const std::vector<ls::StepResult> one = train("host:1", mse_options());
  EXPECT_LT(one.back().loss, one.front().loss);  // it learns
  expect_close_losses(train("host:2", mse_options()), one, 1e-5);
  expect_close_losses(train("host:4", mse_options()), one, 1e-5);
  ls::DataParallelOptions accumulate = mse_options();
  accumulate.accumulate = 2;
  expect_close_losses(train("host:2", accumulate), one, 1e-5);
  ls::DataParallelOptions zero2 = mse_options();
  zero2.shard = ls::ShardMode::kGradients;
  expect_close_losses(train("host:2", zero2), one, 1e-5);
}

TEST(NamedInputs, StepsRunAsGraphsWithTheEagerResults) {
  ls::DataParallelOptions graphs = mse_options(), eager = mse_options();
  graphs.graphs = true;
  eager.graphs = false;
  const std::vector<ls::StepResult> captured = train("host:2", graphs);
  const std::vector<ls::StepResult> plain = train("host:2", eager);
  EXPECT_TRUE(captured.back().graph);
  EXPECT_FALSE(plain.back().graph);
  for (size_t s = 0; s < plain.size(); ++s) EXPECT_EQ(captured[s].loss, plain[s].loss) << s;
}

// On a GPU (scripts/gpu-check runs the Cuda* suites): the inputs' views of the one uploaded byte
// buffer, the bf16 widening and the embedding of the ids, eagerly and as a CUDA graph.
TEST(CudaNamedInputs, TrainOnAGpuAsOnTheHost) {
  if (ls::cuda_availability().device_count == 0) {
    GTEST_SKIP() << ls::cuda_availability().reason_unavailable;
  }
  const std::vector<ls::StepResult> host = train("host:1", mse_options());
  ls::DataParallelOptions eager = mse_options();
  eager.graphs = false;
  expect_close_losses(train("cuda:0", eager), host, 1e-4);
  const std::vector<ls::StepResult> graphs = train("cuda:0", mse_options());
  EXPECT_TRUE(graphs.back().graph);
  expect_close_losses(graphs, host, 1e-4);
}

TEST(NamedInputs, MalformedBatchesAreClearErrors) {
  ls::DataParallel trainer(ls::parse_devices("host:2"), price_model(),
                           ls::make_optimizer_factory({}), mse_options());
  ls::data::Batch short_input = price_batch(8, 1);
  short_input.inputs[1].bytes.pop_back();
  expect_error([&] { trainer.step(short_input); },
               "batch input 'category' holds 31 bytes; 8 examples of i32 [] are 32 bytes");
  ls::data::Batch twice = price_batch(8, 1);
  twice.inputs[2].name = "features";
  expect_error([&] { trainer.step(twice); }, "two batch inputs are named 'features'");
  ls::data::Batch both = price_batch(8, 1);
  both.images.assign(8 * 3, 0.0f);
  expect_error([&] { trainer.step(both); }, "it has named inputs and also 24 float inputs");
  ls::data::Batch zero_dim = price_batch(8, 1);
  zero_dim.inputs[0].shape = {0};
  expect_error([&] { trainer.step(zero_dim); }, "every dimension must be positive");
  ls::data::Batch missing = price_batch(8, 1);
  missing.inputs.erase(missing.inputs.begin() + 1);
  expect_error([&] { trainer.step(missing); },
               "the model asks for input 'category', but the batch has the inputs 'features', "
               "'scaled'");
}

TEST(NamedInputs, ASingleInputModelSaysItTakesOneInput) {
  ls::DataParallel trainer(ls::parse_devices("host:1"), ls::mlp_factory({3, 4, 1}),
                           ls::make_optimizer_factory({}), mse_options());
  expect_error([&] { trainer.step(price_batch(4, 1)); },
               "the model takes one input, but the batch has the inputs 'features', 'category', "
               "'scaled'");
  // One named input reaches a single-input model as its input (a new run: a replica's error
  // ends the one above).
  ls::DataParallel single(ls::parse_devices("host:1"), ls::mlp_factory({3, 4, 1}),
                          ls::make_optimizer_factory({}), mse_options());
  ls::data::Batch one = price_batch(4, 1);
  one.inputs.resize(1);
  EXPECT_TRUE(std::isfinite(single.step(one).loss));
}

TEST(NamedInputs, APipelineRefusesThemClearly) {
  ls::PipelineOptions options;
  options.stages = 1;
  options.micro_batches = 1;
  options.loss = ls::nn::mse_loss();
  ls::Pipeline pipeline(ls::parse_devices("host:1"), ls::mlp_factory({3, 4, 1}),
                        ls::make_optimizer_factory({}), options);
  expect_error([&] { pipeline.step(price_batch(4, 1)); },
               "Pipeline takes a batch of images or tokens; named inputs");
}

TEST(NamedInputs, BytesViewedAsAnotherDtypeMustBeAligned) {
  ls::Tensor words = ls::Tensor::empty({4}, ls::DType::kI32, ls::Device{});
  EXPECT_EQ(words.view_bytes(ls::DType::kBF16, 2, {3}).numel(), 3);
  expect_error([&] { words.view_bytes(ls::DType::kF32, 2, {1}); }, "is not aligned");
  expect_error([&] { words.view_bytes(ls::DType::kBF16, 10, {4}); }, "do not fit in");
}

}  // namespace
