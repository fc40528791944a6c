// The transformers on host devices: a finite-difference gradient check of a whole tiny model,
// padding that changes nothing (last-real-token pooling, key masks), the parameter count, and
// bad input errors.
#include "engine/model/nn/transformer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "engine/model/nn/parameter_store.h"
#include "ops/softmax_xent.h"

namespace ls::nn {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

TransformerConfig tiny(bool classifier, bool bert) {
  TransformerConfig c = bert ? bert_config(2, 2, 8, 6, 11) : gpt_config(2, 2, 8, 6, 11);
  c.ffn = 12;
  c.pad_id = 0;
  if (classifier) c.classes = 3;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 1));
  return out;
}

// Mean loss of the model on tokens [b, t] and labels; gradients into store.grads() if `grads`.
float loss_of(Transformer& model, ParameterStore& store, const std::vector<int32_t>& tokens,
              int64_t b, int64_t t, const std::vector<int32_t>& labels, Stream& stream,
              bool grads) {
  Tensor ids = Tensor::from_host_i32(tokens, {b, t}, kHost0, stream);
  Tensor y = Tensor::from_host_i32(labels, {static_cast<int64_t>(labels.size())}, kHost0, stream);
  Tape tape(stream, grads);
  Var loss = cross_entropy(tape, model.forward(tape, tape.constant(ids)), y);
  if (grads) {
    store.zero_grad(stream);
    tape.backward(loss);
  }
  return loss->value.to_host_f32(stream)[0];
}

void check_gradients(bool classifier, bool bert) {
  auto stream = device_runtime(kHost0).create_stream();
  const TransformerConfig c = tiny(classifier, bert);
  Transformer model(c);
  ParameterStore store(model, kHost0, *stream, 5);
  const int64_t b = 2, t = 5;
  std::vector<int32_t> tokens = random_tokens(b * t, static_cast<int32_t>(c.vocab), 3);
  tokens[9] = c.pad_id;  // the second sequence ends in padding
  std::vector<int32_t> labels = classifier ? std::vector<int32_t>{1, 2}
                                           : random_tokens(b * t, static_cast<int32_t>(c.vocab), 4);
  if (!classifier) labels[9] = kIgnoreLabel;
  loss_of(model, store, tokens, b, t, labels, *stream, true);
  const std::vector<float> grads = store.grads().to_host_f32(*stream);
  std::vector<float> values = store.values_to_host(*stream);
  const double eps = 3e-3;  // small: the tiny model's LayerNorms curve sharply
  int checked = 0;
  // Every 7th parameter value (all kinds of parameter get some), central differences in f32.
  for (size_t i = 0; i < values.size(); i += 7) {
    const float saved = values[i];
    auto loss_at = [&](float v) {
      values[i] = v;
      store.values().copy_from_host_async(values.data(), values.size() * sizeof(float), *stream);
      return static_cast<double>(loss_of(model, store, tokens, b, t, labels, *stream, false));
    };
    const double numeric =
        (loss_at(saved + static_cast<float>(eps)) - loss_at(saved - static_cast<float>(eps))) /
        (2 * eps);
    values[i] = saved;
    std::string name;
    for (const Parameter* p : model.parameters()) {
      if (static_cast<int64_t>(i) >= p->offset) name = p->name;
    }
    EXPECT_NEAR(grads[i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
        << "parameter value " << i << " in " << name;
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

TEST(Transformer, GptGradientsMatchFiniteDifferences) { check_gradients(false, false); }
TEST(Transformer, GptClassifierGradientsMatchFiniteDifferences) { check_gradients(true, false); }
TEST(Transformer, BertClassifierGradientsMatchFiniteDifferences) { check_gradients(true, true); }

// Logits of one sequence, alone or padded to a longer batch.
std::vector<float> classify(Transformer& model, const std::vector<int32_t>& tokens, int64_t b,
                            int64_t t, Stream& stream) {
  Tensor ids = Tensor::from_host_i32(tokens, {b, t}, kHost0, stream);
  Tape tape(stream, false);
  return model.forward(tape, tape.constant(ids))->value.to_host_f32(stream);
}

void check_padding_changes_nothing(bool bert, Pooling pooling) {
  auto stream = device_runtime(kHost0).create_stream();
  TransformerConfig c = tiny(true, bert);
  c.pooling = pooling;
  Transformer model(c);
  ParameterStore store(model, kHost0, *stream, 9);
  const std::vector<int32_t> short_seq = random_tokens(3, static_cast<int32_t>(c.vocab), 21);
  const std::vector<float> alone = classify(model, short_seq, 1, 3, *stream);
  // The same sequence right-padded to 6 tokens, next to a full one.
  std::vector<int32_t> batch = random_tokens(6, static_cast<int32_t>(c.vocab), 22);
  batch.insert(batch.end(), short_seq.begin(), short_seq.end());
  batch.insert(batch.end(), 3, c.pad_id);
  const std::vector<float> padded = classify(model, batch, 2, 6, *stream);
  ASSERT_EQ(padded.size(), 6u);
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(padded[3 + static_cast<size_t>(k)], alone[k], 1e-5);
}

TEST(Transformer, LastTokenPoolingReadsTheLastRealTokenNotThePadding) {
  check_padding_changes_nothing(false, Pooling::kLast);
}
TEST(Transformer, MeanPoolingAndKeyMasksIgnorePadding) {
  check_padding_changes_nothing(true, Pooling::kMean);
  check_padding_changes_nothing(true, Pooling::kFirst);
}

TEST(Transformer, ParameterCountMatchesTheConfig) {
  for (bool classifier : {false, true}) {
    for (bool bert : {false, true}) {
      const TransformerConfig c = tiny(classifier, bert);
      Transformer model(c);
      EXPECT_EQ(model.parameter_count(), c.parameter_count()) << c.describe();
    }
  }
}

TEST(Transformer, BadConfigsAndInputsSayWhatToFix) {
  TransformerConfig c = tiny(false, false);
  c.heads = 3;
  try {
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide by heads 3"), std::string::npos);
  }
  auto stream = device_runtime(kHost0).create_stream();
  Transformer model(tiny(false, false));
  ParameterStore store(model, kHost0, *stream, 1);
  Tape tape(*stream, false);
  Tensor too_long = Tensor::from_host_i32(std::vector<int32_t>(7, 1), {1, 7}, kHost0, *stream);
  try {
    model.forward(tape, tape.constant(too_long));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed the model's max_seq 6"), std::string::npos);
  }
  Tensor floats = Tensor::from_host(std::vector<float>(6, 1.0f), {1, 6}, kHost0, *stream);
  EXPECT_THROW(model.forward(tape, tape.constant(floats)), Error);
}

}  // namespace
}  // namespace ls::nn
