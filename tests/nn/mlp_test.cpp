// Autograd and the MLP: a finite-difference gradient check of the whole model, the grad-ready
// hook order, the flat parameter layout and seeded initialisation.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include <lockstep/nn/module.h>
#include "engine/model/nn/parameter_store.h"
#include "tests/nn/finite_differences.h"

namespace ls::nn {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

struct Problem {
  std::vector<float> inputs;
  std::vector<int32_t> labels;
  int64_t rows;
};

Problem make_problem(int64_t rows, int64_t features, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Problem p{{}, {}, rows};
  for (int64_t i = 0; i < rows * features; ++i) p.inputs.push_back(normal(rng));
  for (int64_t i = 0; i < rows; ++i) p.labels.push_back(static_cast<int32_t>(rng() % classes));
  return p;
}

// Loss (and, when `tape_records`, gradients in store.grads()) of the model on the problem.
float run_loss(Module& model, ParameterStore& store, const Problem& p, Stream& stream,
               bool tape_records) {
  const int64_t features = static_cast<int64_t>(p.inputs.size()) / p.rows;
  Tensor x = Tensor::from_host(p.inputs, {p.rows, features}, kHost0, stream);
  Tensor y = Tensor::from_host_i32(p.labels, {p.rows}, kHost0, stream);
  Tape tape(stream, tape_records);
  Var loss = cross_entropy(tape, model.forward(tape, tape.constant(x)), y);
  if (tape_records) {
    store.zero_grad(stream);
    tape.backward(loss);
  }
  return loss->value.to_host_f32(stream)[0];
}

void check_gradients(Activation activation) {
  auto stream = device_runtime(kHost0).create_stream();
  auto model = mlp({6, 5, 4, 3}, activation);
  ParameterStore store(*model, kHost0, *stream, 7);
  const Problem problem = make_problem(4, 6, 3, 11);
  run_loss(*model, store, problem, *stream, true);
  const int64_t checked = test::expect_gradients_match_finite_differences(store, *stream, [&] {
    return static_cast<double>(run_loss(*model, store, problem, *stream, false));
  });
  EXPECT_EQ(checked, store.parameter_count());
}

TEST(MlpGradient, MatchesFiniteDifferencesWithGelu) { check_gradients(Activation::kGELU); }
TEST(MlpGradient, MatchesFiniteDifferencesWithRelu) { check_gradients(Activation::kReLU); }

TEST(ParameterStore, FlatAlignedViewsWithPaddingZeroed) {
  auto stream = device_runtime(kHost0).create_stream();
  auto model = mlp({784, 256, 10});
  ParameterStore store(*model, kHost0, *stream, 1);
  ASSERT_EQ(store.parameters().size(), 4u);
  EXPECT_EQ(store.parameters()[0]->name, "0.weight");
  EXPECT_EQ(store.parameters()[3]->name, "2.bias");
  EXPECT_EQ(store.parameter_count(), 784 * 256 + 256 + 256 * 10 + 10);
  for (Parameter* p : store.parameters()) {
    EXPECT_EQ(p->offset % ParameterStore::kAlignment, 0) << p->name;
    EXPECT_EQ(p->value.data(), store.values().f32() + p->offset);
    EXPECT_EQ(p->grad.data(), store.grads().f32() + p->offset);
  }
  const std::vector<float> values = store.values_to_host(*stream);
  const Parameter* last = store.parameters().back();
  for (size_t i = static_cast<size_t>(last->offset + last->numel()); i < values.size(); ++i) {
    EXPECT_EQ(values[i], 0.0f);  // padding
  }
  // PyTorch's Linear init bound: 1/sqrt(fan_in).
  const float bound = 1.0f / std::sqrt(784.0f);
  for (int64_t i = 0; i < 784 * 256; ++i)
    ASSERT_LE(std::abs(values[static_cast<size_t>(i)]), bound);
}

TEST(ParameterStore, SameSeedSameValuesOtherSeedOtherValues) {
  auto stream = device_runtime(kHost0).create_stream();
  auto a = mlp({8, 4, 2});
  auto b = mlp({8, 4, 2});
  auto c = mlp({8, 4, 2});
  ParameterStore sa(*a, kHost0, *stream, 5), sb(*b, kHost0, *stream, 5), sc(*c, kHost0, *stream, 6);
  EXPECT_EQ(sa.values_to_host(*stream), sb.values_to_host(*stream));
  EXPECT_NE(sa.values_to_host(*stream), sc.values_to_host(*stream));
}

TEST(ParameterStore, AModelBelongsToOneStore) {
  auto stream = device_runtime(kHost0).create_stream();
  auto model = mlp({4, 2});
  ParameterStore first(*model, kHost0, *stream, 1);
  EXPECT_THROW(ParameterStore(*model, kHost0, *stream, 1), Error);
}

TEST(Autograd, GradReadyHookFiresOncePerParameterInReverseOrder) {
  auto stream = device_runtime(kHost0).create_stream();
  auto model = mlp({6, 5, 4, 3});
  ParameterStore store(*model, kHost0, *stream, 3);
  const Problem p = make_problem(2, 6, 3, 1);
  Tensor x = Tensor::from_host(p.inputs, {2, 6}, kHost0, *stream);
  Tensor y = Tensor::from_host_i32(p.labels, {2}, kHost0, *stream);
  Tape tape(*stream);
  std::vector<std::string> ready;
  tape.set_grad_ready_hook([&](Parameter& param) { ready.push_back(param.name); });
  Var loss = cross_entropy(tape, model->forward(tape, tape.constant(x)), y);
  tape.backward(loss);
  stream->synchronize();
  EXPECT_EQ(ready, (std::vector<std::string>{"4.weight", "4.bias", "2.weight", "2.bias",
                                             "0.weight", "0.bias"}));
}

// A module that uses one weight twice, as a GPT ties its embedding and output projection.
class TiedTwice final : public Module {
 public:
  TiedTwice() : weight_(register_parameter("weight", {3, 3}, Init::uniform(0.5f))) {}
  Var forward(Tape& tape, const Var& input) override {
    Var w = tape.parameter(weight_);
    return linear(tape, linear(tape, input, w, nullptr), w, nullptr);
  }

 private:
  Parameter& weight_;
};

TEST(Autograd, TiedWeightHookFiresAfterTheLastUse) {
  auto stream = device_runtime(kHost0).create_stream();
  TiedTwice model;
  ParameterStore store(model, kHost0, *stream, 3);
  const Problem p = make_problem(2, 3, 3, 2);
  Tensor x = Tensor::from_host(p.inputs, {2, 3}, kHost0, *stream);
  Tensor y = Tensor::from_host_i32(p.labels, {2}, kHost0, *stream);
  Tape tape(*stream);
  int fired = 0;
  tape.set_grad_ready_hook([&](Parameter&) { ++fired; });
  Var loss = cross_entropy(tape, model.forward(tape, tape.constant(x)), y);
  store.zero_grad(*stream);
  tape.backward(loss);
  EXPECT_EQ(fired, 1);
}

TEST(Autograd, BackwardOnAnEvaluationTapeIsAnError) {
  auto stream = device_runtime(kHost0).create_stream();
  auto model = mlp({2, 2});
  ParameterStore store(*model, kHost0, *stream, 1);
  Tape tape(*stream, /*record=*/false);
  Tensor x = Tensor::from_host(std::vector<float>{1, 2}, {1, 2}, kHost0, *stream);
  Var out = model->forward(tape, tape.constant(x));
  EXPECT_THROW(tape.backward(out), Error);
}

TEST(Linear, ShapeMismatchNamesBothShapes) {
  auto stream = device_runtime(kHost0).create_stream();
  auto model = mlp({4, 2});
  ParameterStore store(*model, kHost0, *stream, 1);
  Tape tape(*stream);
  Tensor x = Tensor::empty({3, 5}, DType::kF32, kHost0);
  try {
    model->forward(tape, tape.constant(x));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 5]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[2, 4]"), std::string::npos);
  }
}

}  // namespace
}  // namespace ls::nn
