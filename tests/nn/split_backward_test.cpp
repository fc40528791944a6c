// Tape::backward_input and Tape::backward_weights (the B and W of zero-bubble pipelines): B
// leaves every parameter gradient untouched and makes the input gradient backward() makes; W
// then makes the parameter gradients bitwise backward()'s, and fires the grad-ready hooks in the
// same order. Checked on a GPT (a weight tied between the embedding and the head, layernorms,
// dropout), with and without recomputed blocks, and on an MLP with a differentiable input; an op
// whose backward ignores requires_grad is refused.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <lockstep/data_parallel.h>
#include <lockstep/error.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include <lockstep/nn/module.h>
#include <lockstep/transformer_config.h>
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "ops/elementwise.h"

namespace ls::nn {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

struct Gradients {
  std::vector<float> parameters;     // the flat gradient buffer
  std::vector<float> input;          // the differentiable input's, where there is one
  std::vector<float> input_after_b;  // split: the input's gradient once B alone has run
  std::vector<std::string> ready;    // grad-ready hooks, in firing order
};

std::vector<float> host_values(const Tensor& t, Stream& stream) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  t.copy_to_host_async(out.data(), out.size() * sizeof(float), stream);
  stream.synchronize();
  return out;
}

enum class How { kWhole, kSplit };

// One forward and backward of `model` on `input` (a constant, or differentiable when
// `float_input`), from zeroed gradients, the backward whole or split into B and W.
Gradients run(Module& model, ParameterStore& store, Stream& stream, const Tensor& input,
              const Tensor& labels, bool float_input, bool recompute, How how) {
  store.zero_grad(stream);
  Tape tape(stream);
  ForwardContext context;
  context.training = true;
  context.seed = 5;
  context.step = 3;
  context.recompute = recompute;
  tape.set_context(context);
  Gradients out;
  tape.set_grad_ready_hook([&](Parameter& p) { out.ready.push_back(p.name); });
  const Var x = float_input ? tape.differentiable_input(input) : tape.constant(input);
  const Var loss = cross_entropy(tape, model.forward(tape, x), labels);
  if (how == How::kWhole) {
    tape.backward(loss);
  } else {
    tape.backward_input(loss);
    EXPECT_TRUE(out.ready.empty()) << "a parameter's gradient was final after B";
    const std::vector<float> after_b = host_values(store.grads(), stream);
    for (float g : after_b) EXPECT_EQ(g, 0.0f) << "B wrote a parameter gradient";
    if (float_input) out.input_after_b = host_values(x->grad, stream);
    tape.backward_weights();
  }
  out.parameters = host_values(store.grads(), stream);
  if (float_input) out.input = host_values(x->grad, stream);
  return out;
}

void expect_bitwise(const Gradients& whole, const Gradients& split) {
  EXPECT_EQ(split.parameters, whole.parameters);
  EXPECT_EQ(split.input, whole.input);
  EXPECT_EQ(split.input_after_b, whole.input);  // B alone made it: the previous stage's input
  EXPECT_EQ(split.ready, whole.ready);
  EXPECT_FALSE(whole.ready.empty());
}

TEST(SplitBackward, AGptsWeightGradientsAreBitwiseWholeBackwards) {
  TransformerConfig c = gpt_config(2, 2, 16, 8, 20);
  c.ffn = 24;
  c.pad_id = 0;
  c.dropout = 0.1f;  // keyed by (seed, step, row, site): the same masks in every run
  auto model = make_transformer(c);
  auto stream = device_runtime(kHost0).create_stream();
  ParameterStore store(*model, kHost0, *stream, 7);
  std::mt19937 rng(11);
  std::vector<int32_t> tokens(3 * 8), labels(3 * 8);
  for (int32_t& t : tokens) t = 1 + static_cast<int32_t>(rng() % 19);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = tokens[(i + 1) % tokens.size()];
  const Tensor ids = Tensor::from_host_i32(tokens, {3, 8}, kHost0, *stream);
  const Tensor y = Tensor::from_host_i32(labels, {3 * 8}, kHost0, *stream);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recomputed blocks" : "no recompute");
    const Gradients whole = run(*model, store, *stream, ids, y, false, recompute, How::kWhole);
    const Gradients split = run(*model, store, *stream, ids, y, false, recompute, How::kSplit);
    expect_bitwise(whole, split);
  }
}

TEST(SplitBackward, AnMlpsInputGradientComesFromBAlone) {
  auto model = std::make_unique<Sequential>();
  model->add(std::make_unique<Linear>(6, 5));
  model->add(std::make_unique<GELU>());
  model->add(std::make_unique<Linear>(5, 3));
  auto stream = device_runtime(kHost0).create_stream();
  ParameterStore store(*model, kHost0, *stream, 3);
  std::vector<float> inputs(4 * 6);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  const Tensor x = Tensor::from_host(inputs, {4, 6}, kHost0, *stream);
  const Tensor y = Tensor::from_host_i32(std::vector<int32_t>{0, 2, 1, 2}, {4}, kHost0, *stream);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recomputed layers" : "no recompute");
    const Gradients whole = run(*model, store, *stream, x, y, true, recompute, How::kWhole);
    const Gradients split = run(*model, store, *stream, x, y, true, recompute, How::kSplit);
    expect_bitwise(whole, split);
    EXPECT_EQ(whole.input.size(), inputs.size());
    EXPECT_EQ(split.input_after_b.size(), inputs.size());
  }
}

// An op of one's own whose backward writes its weight's gradient whether asked or not: split
// backward would add it twice, so B refuses it, naming the parameter.
TEST(SplitBackward, AnOpThatIgnoresRequiresGradIsAnError) {
  auto model = std::make_unique<Sequential>();
  model->add(std::make_unique<Linear>(2, 2));
  auto stream = device_runtime(kHost0).create_stream();
  ParameterStore store(*model, kHost0, *stream, 1);
  Tape tape(*stream);
  const Var x = tape.differentiable_input(
      Tensor::from_host(std::vector<float>{1, 2}, {1, 2}, kHost0, *stream));
  const Var w = tape.parameter(*model->parameters()[0]);
  const Var y = linear(tape, x, w, nullptr);
  const Var out = tape.output(y->value, {&y, &w});  // y again, reading w in its backward
  Stream* s = stream.get();
  tape.record(out, {y, w}, [y, w, s](const Tensor& dy) {
    if (y->requires_grad) {
      Tape::begin_grad(*y);
      y->grad.copy_from(dy, *s);
    }
    Tape::begin_grad(*w);  // whatever w->requires_grad says
    fill(w->grad, 1.0f, *s);
  });
  const Tensor labels = Tensor::from_host_i32(std::vector<int32_t>{1}, {1}, kHost0, *stream);
  try {
    tape.backward_input(cross_entropy(tape, out, labels));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrote the gradient of parameter '0.weight' although"),
              std::string::npos)
        << e.what();
  }
}

TEST(SplitBackward, ASecondBWithoutItsWIsAnError) {
  auto model = std::make_unique<Sequential>();
  model->add(std::make_unique<Linear>(2, 2));
  auto stream = device_runtime(kHost0).create_stream();
  ParameterStore store(*model, kHost0, *stream, 1);
  const Tensor x = Tensor::from_host(std::vector<float>{1, 2}, {1, 2}, kHost0, *stream);
  const Tensor y = Tensor::from_host_i32(std::vector<int32_t>{1}, {1}, kHost0, *stream);
  Tape tape(*stream);
  tape.backward_input(cross_entropy(tape, model->forward(tape, tape.constant(x)), y));
  const Var again = cross_entropy(tape, model->forward(tape, tape.constant(x)), y);
  try {
    tape.backward_input(again);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("call backward_weights() first"), std::string::npos);
  }
}

}  // namespace
}  // namespace ls::nn
