// Hugging Face checkpoints: lockstep's forward on the committed GPT-2, GPT-2 classifier, BERT and
// BERT classifier (with its pooler) fixtures (tests/fixtures/hf, made by
// scripts/make_hf_fixtures.py with transformers) matches transformers' outputs; writing and reading
// back is lossless; missing, unknown and misshapen tensors are errors that name them.
#include <lockstep/hf_transformer.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <lockstep/error.h>
#include "engine/core/json_reader.h"
#include "engine/core/runtime.h"
#include "engine/model/checkpoint/safetensors.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include <lockstep/data_parallel.h>

namespace ls::checkpoint {
namespace {

const Device kHost0{DeviceKind::kHost, 0};
const std::string kFixtures = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/fixtures/hf/";

JsonValue read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return parse_json(text.str(), path, JsonLimits{size_t{8} << 20});
}

// Nested JSON arrays of numbers, flattened in order.
template <typename T>
void flatten(const JsonValue& v, std::vector<T>& out) {
  if (v.is_array()) {
    for (const JsonValue& item : v.items()) flatten(item, out);
  } else if constexpr (std::is_integral_v<T>) {
    out.push_back(static_cast<T>(v.as_int64()));
  } else {
    out.push_back(static_cast<T>(v.as_double()));
  }
}

struct Fixture {
  nn::TransformerConfig config;
  std::vector<int32_t> ids;
  std::vector<float> expected;
};

Fixture load_fixture(const std::string& name, const char* output) {
  Fixture f;
  f.config = read_hf_config(kFixtures + name);
  const JsonValue json = read_json(kFixtures + name + "/expected.json");
  flatten(*json.find("input_ids"), f.ids);
  flatten(*json.find(output), f.expected);
  return f;
}

// The model's output (forward, or the final hidden states) on the fixture's input.
std::vector<float> run(const nn::TransformerConfig& config, const HostTensors& weights,
                       const std::vector<int32_t>& ids, bool hidden) {
  auto stream = device_runtime(kHost0).create_stream();
  auto module = transformer_factory(config, std::make_shared<const HostTensors>(weights))();
  auto& model = dynamic_cast<nn::Transformer&>(*module);
  nn::ParameterStore store(model, kHost0, *stream, 1);
  Tensor tokens =
      Tensor::from_host_i32(ids, {2, static_cast<int64_t>(ids.size()) / 2}, kHost0, *stream);
  Tape tape(*stream, false);
  Var out = hidden ? model.hidden_states(tape, tape.constant(tokens))
                   : model.forward(tape, tape.constant(tokens));
  return out->value.to_host_f32(*stream);
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
  }
  EXPECT_LE(worst, 1e-4) << "max abs difference from transformers' output";
}

TEST(HfTransformer, Gpt2LanguageModelLogitsMatchTransformers) {
  Fixture f = load_fixture("gpt2", "logits");
  EXPECT_EQ(hf_model_type(f.config), "gpt2");
  expect_close(run(f.config, read_hf_weights(kFixtures + "gpt2", f.config), f.ids, false),
               f.expected);
}

TEST(HfTransformer, Gpt2ClassifierPoolsTheLastRealTokenLikeTransformers) {
  Fixture f = load_fixture("gpt2-cls", "logits");
  f.config.classes = 4;
  f.config.head_bias = false;
  f.config.pooling = nn::Pooling::kLast;
  expect_close(run(f.config, read_hf_weights(kFixtures + "gpt2-cls", f.config), f.ids, false),
               f.expected);
}

TEST(HfTransformer, BertHiddenStatesMatchTransformersWithPadding) {
  Fixture f = load_fixture("bert", "last_hidden_state");
  EXPECT_EQ(hf_model_type(f.config), "bert");
  expect_close(run(f.config, read_hf_weights(kFixtures + "bert", f.config), f.ids, true),
               f.expected);
}

// The public way to the same numbers: make_transformer with config.hidden_states (an
// application's encoder, examples/supersenses) returns the hidden states from forward().
TEST(HfTransformer, APublicEncoderReturnsBertsHiddenStates) {
  Fixture f = load_fixture("bert", "last_hidden_state");
  f.config.hidden_states = true;
  auto stream = device_runtime(kHost0).create_stream();
  std::unique_ptr<nn::Module> encoder = make_transformer(
      f.config, std::make_shared<const HostTensors>(read_hf_weights(kFixtures + "bert", f.config)));
  nn::ParameterStore store(*encoder, kHost0, *stream, 1);
  Tensor tokens =
      Tensor::from_host_i32(f.ids, {2, static_cast<int64_t>(f.ids.size()) / 2}, kHost0, *stream);
  Tape tape(*stream, false);
  Var out = encoder->forward(tape, nn::Inputs::single(tape.constant(tokens)));
  EXPECT_EQ(out->value.shape(), (Shape{16, 32}));
  expect_close(out->value.to_host_f32(*stream), f.expected);
  nn::TransformerConfig both = f.config;
  both.classes = 4;
  EXPECT_THROW(make_transformer(both), Error);  // hidden states and a classifier head: refused
}

TEST(HfTransformer, BertClassifierWithItsPoolerMatchesTransformers) {
  Fixture f = load_fixture("bert-cls", "logits");
  f.config.classes = 4;
  EXPECT_TRUE(f.config.pooler);
  expect_close(run(f.config, read_hf_weights(kFixtures + "bert-cls", f.config), f.ids, false),
               f.expected);
}

TEST(HfTransformer, ConfigOptionsLockstepDoesNotComputeAreRefused) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("lockstep-hf-config-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 32, "n_positions": 16,)"
      << R"( "vocab_size": 64, "scale_attn_by_inverse_layer_idx": true})";
  try {
    read_hf_config(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"scale_attn_by_inverse_layer_idx\": true is not "
                                         "supported"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

class HfFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("lockstep-hf-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // A copy of fixture `name` with its tensors edited by `edit`.
  std::string edited(const std::string& name,
                     const std::function<void(std::vector<NamedHostTensor>&)>& edit) {
    ++copies_;
    const SafetensorsFile file = read_safetensors(kFixtures + name + "/model.safetensors");
    std::vector<NamedHostTensor> tensors;
    for (const SafetensorsTensor& t : file.tensors()) {
      tensors.push_back({t.name, t.dtype, t.shape, t.data});
    }
    edit(tensors);
    const std::string out = (dir_ / (name + "-" + std::to_string(copies_))).string();
    std::filesystem::create_directories(out);
    std::filesystem::copy_file(kFixtures + name + "/config.json", out + "/config.json");
    write_safetensors(out + "/model.safetensors", tensors);
    return out;
  }
  std::filesystem::path dir_;
  int copies_ = 0;
};

TEST_F(HfFiles, WritingAndReadingBackIsLossless) {
  for (const char* name : {"gpt2", "gpt2-cls", "bert", "bert-cls"}) {
    nn::TransformerConfig config = read_hf_config(kFixtures + name);
    if (std::string(name) == "gpt2-cls") {
      config.classes = 4;
      config.head_bias = false;
    }
    if (std::string(name) == "bert-cls") config.classes = 4;
    const HostTensors weights = read_hf_weights(kFixtures + name, config);
    const std::string out = (dir_ / name).string();
    write_hf(out, config, weights);
    const nn::TransformerConfig back = read_hf_config(out);
    EXPECT_EQ(back.hidden, config.hidden);
    EXPECT_EQ(back.layers, config.layers);
    EXPECT_EQ(back.gelu, config.gelu);
    const HostTensors again = read_hf_weights(out, config);
    ASSERT_EQ(again.size(), weights.size()) << name;
    for (const auto& [param, t] : weights) {
      EXPECT_EQ(again.at(param).shape, t.shape) << param;
      EXPECT_EQ(again.at(param).values, t.values) << param;
    }
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(HfFiles, MissingUnknownAndMisshapenTensorsAreNamed) {
  const nn::TransformerConfig config = read_hf_config(kFixtures + "gpt2");
  const std::string missing = edited("gpt2", [](std::vector<NamedHostTensor>& t) {
    std::erase_if(t,
                  [](const NamedHostTensor& x) { return x.name == "transformer.h.1.ln_2.bias"; });
  });
  EXPECT_NE(error_of([&] {
              read_hf_weights(missing, config);
            }).find("lacks tensors a gpt2 model of this config needs: transformer.h.1.ln_2.bias"),
            std::string::npos);

  static const float extra[2] = {1, 2};
  const std::string unknown = edited("gpt2", [](std::vector<NamedHostTensor>& t) {
    t.push_back({"transformer.h.2.ln_1.weight",
                 SafetensorsDType::kF32,
                 {2},
                 std::as_bytes(std::span<const float>(extra))});
  });
  EXPECT_NE(error_of([&] {
              read_hf_weights(unknown, config);
            }).find("has no place for: transformer.h.2.ln_1.weight"),
            std::string::npos);

  nn::TransformerConfig wider = config;
  wider.hidden = 64;
  wider.ffn = 256;
  EXPECT_NE(error_of([&] {
              read_hf_weights(kFixtures + "gpt2", wider);
            }).find("transformer.wte.weight is [64, 32], expected [64, 64]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_hf_config("/nonexistent"); }).find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace ls::checkpoint
