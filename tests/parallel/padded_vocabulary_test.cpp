// Note [The padded vocabulary] (engine/model/nn/functional.cpp): a language model's bf16 step
// multiplies its tied head with the vocabulary padded to a multiple of 128 and the extra logits
// masked. It must train as the unpadded head does, the engine's room after the embedding must stay
// zero whatever the optimizer does, and what a user sees (parameters, checkpoints) keeps the
// vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/data_parallel.h>
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include "ops/elementwise.h"
#include <lockstep/nn/functional.h>
#include "training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::lm_batch;
using testing::tiny_gpt_config;

constexpr int64_t kVocab = 20, kHidden = 16, kPadded = 128;  // tiny_gpt_config's, padded

nn::TransformerConfig config_padded_to(int64_t multiple) {
  nn::TransformerConfig c = tiny_gpt_config();
  c.pad_vocab_multiple = multiple;
  return c;
}

struct Training {
  std::vector<float> losses;
  std::vector<NamedParameter> parameters;
  std::vector<float> flat;  // replica 0's flat values
};

Training train_bf16(int64_t multiple, int devices, int steps) {
  DataParallelOptions options;
  options.precision = Precision::kBF16;
  options.graphs = false;
  OptimizerSpec adamw{"adamw", 3e-3f};
  adamw.weight_decay = 0.1f;
  DataParallel dp(hosts(devices), transformer_factory(config_padded_to(multiple)),
                  make_optimizer_factory(adamw), options);
  Training run;
  for (int s = 0; s < steps; ++s) {
    run.losses.push_back(dp.step(lm_batch(16, 700 + static_cast<uint32_t>(s))).loss);
  }
  run.parameters = dp.model_parameters();
  run.flat = dp.parameters(0);
  return run;
}

const NamedParameter& named(const std::vector<NamedParameter>& all, const std::string& name) {
  for (const NamedParameter& p : all) {
    if (p.name == name) return p;
  }
  throw std::runtime_error("no parameter " + name);
}

// The logits of a bf16 step: [rows, 128], the 20 real columns the unpadded head's values, the
// rest -infinity (read before the loss overwrites them with their gradient).
TEST(PaddedVocabulary, TheHeadWritesPaddedLogitsWithTheExtraColumnsMasked) {
  const Device host0{DeviceKind::kHost, 0};
  auto stream = device_runtime(host0).create_stream();
  std::vector<std::vector<float>> logits;
  for (const int64_t multiple : {kPadded, int64_t{1}}) {
    nn::Transformer model(config_padded_to(multiple));
    nn::ParameterStore store(model, host0, *stream, 5);
    store.keep_bf16_copy(*stream);
    Tape tape(*stream);
    ForwardContext context;
    context.training = true;
    context.precision = Precision::kBF16;
    context.logits_in_bf16 = true;
    tape.set_context(context);
    std::vector<int32_t> ids(16);
    for (int i = 0; i < 16; ++i) ids[static_cast<size_t>(i)] = 1 + (i * 7) % 19;
    Var out =
        model.forward(tape, tape.constant(Tensor::from_host_i32(ids, {2, 8}, host0, *stream)));
    ASSERT_EQ(out->value.dtype(), DType::kBF16);
    ASSERT_EQ(out->value.shape(), (Shape{16, multiple == 1 ? kVocab : kPadded}));
    Tensor widened = Tensor::empty(out->value.shape(), DType::kF32, host0);
    cast(out->value, widened, *stream);
    logits.push_back(widened.to_host_f32(*stream));
  }
  const std::vector<float>& padded = logits[0];
  const std::vector<float>& plain = logits[1];
  int64_t wrong = 0;
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t c = 0; c < kPadded; ++c) {
      const float got = padded[static_cast<size_t>(r * kPadded + c)];
      if (c < kVocab) {
        wrong += got != plain[static_cast<size_t>(r * kVocab + c)];
      } else {
        wrong += got != -std::numeric_limits<float>::infinity();
      }
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << 16 * kPadded << " logits";
}

// Losses and parameters after three AdamW steps (weight decay on) are bit for bit the unpadded
// head's, on one device and two: the masked columns add exact zeros to every sum the host makes
// (a GPU's products may block the padded shapes differently, so there it is within rounding).
TEST(PaddedVocabulary, TrainsBitwiseAsTheUnpaddedHead) {
  for (const int devices : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << devices << " device(s)");
    const Training padded = train_bf16(kPadded, devices, 3), plain = train_bf16(1, devices, 3);
    EXPECT_EQ(padded.losses, plain.losses);
    ASSERT_EQ(padded.parameters.size(), plain.parameters.size());
    for (size_t i = 0; i < padded.parameters.size(); ++i) {
      const NamedParameter &a = padded.parameters[i], &b = plain.parameters[i];
      ASSERT_EQ(a.name, b.name);
      ASSERT_EQ(a.shape, b.shape) << a.name;
      size_t differ = 0;
      for (size_t j = 0; j < a.values.size(); ++j) {
        differ += std::memcmp(&a.values[j], &b.values[j], sizeof(float)) != 0;
      }
      EXPECT_EQ(differ, 0u) << a.name << ": values that differ, of " << a.values.size();
    }
  }
}

// What the engine keeps after the embedding's 20 rows stays zero under AdamW's weight decay, and
// the model's parameters (what checkpoints and exports write) keep 20 rows.
TEST(PaddedVocabulary, TheRoomStaysZeroAndTheParametersKeepTheVocabulary) {
  const Training run = train_bf16(kPadded, 2, 3);
  const NamedParameter& wte = named(run.parameters, "wte.weight");
  EXPECT_EQ(wte.shape, (Shape{kVocab, kHidden}));
  EXPECT_EQ(wte.values.size(), static_cast<size_t>(kVocab * kHidden));
  ASSERT_GE(run.flat.size(), static_cast<size_t>(kPadded * kHidden));
  int64_t nonzero = 0;
  for (int64_t i = kVocab * kHidden; i < kPadded * kHidden; ++i) {
    nonzero += run.flat[static_cast<size_t>(i)] != 0.0f;
  }
  // Without the room, wpe's values would start at element 320: this would count them.
  EXPECT_EQ(nonzero, 0) << "the room after wte (the first parameter) was written";
}

}  // namespace
}  // namespace ls
