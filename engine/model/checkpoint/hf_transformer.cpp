// Hugging Face GPT-2 and BERT checkpoints <-> lockstep's transformer (see hf_transformer.h).
// One table (hf_entries) says which file tensors make each lockstep parameter and how (copy,
// transpose a Conv1D weight, stack q/k/v); reading and writing both walk it, so the two
// directions cannot disagree.
#include <lockstep/hf_transformer.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <lockstep/error.h>
#include <lockstep/json.h>
#include "engine/core/json_reader.h"
#include "engine/model/checkpoint/atomic_file.h"
#include "engine/model/checkpoint/safetensors.h"
#include "engine/model/nn/transformer.h"

namespace ls::checkpoint {
namespace {

enum class Transform { kCopy, kTranspose, kStackRows };

struct Entry {
  std::string ours;
  std::vector<std::string> theirs;  // without the model prefix for backbone tensors
  Transform transform = Transform::kCopy;
  bool head = false;      // the classifier head: named without the backbone prefix
  bool optional = false;  // may be absent (fine-tuning a model without it): stays fresh
};

bool is_gpt2(const nn::TransformerConfig& c) { return c.norm == nn::NormPlacement::kPre; }

// The prefix a task model (GPT2LMHeadModel, BertForSequenceClassification) puts on backbone names.
std::string backbone_prefix(const nn::TransformerConfig& c) {
  return is_gpt2(c) ? "transformer." : "bert.";
}

void add_pair(std::vector<Entry>& out, const std::string& ours, const std::string& theirs,
              Transform transform = Transform::kCopy) {
  out.push_back({ours + ".weight", {theirs + ".weight"}, transform});
  out.push_back({ours + ".bias", {theirs + ".bias"}, Transform::kCopy});
}

std::vector<Entry> gpt2_entries(const nn::TransformerConfig& c) {
  std::vector<Entry> e{{"wte.weight", {"wte.weight"}}, {"wpe.weight", {"wpe.weight"}}};
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string ours = "h." + std::to_string(i) + ".", theirs = ours;
    add_pair(e, ours + "ln_1", theirs + "ln_1");
    add_pair(e, ours + "attn.qkv", theirs + "attn.c_attn", Transform::kTranspose);
    add_pair(e, ours + "attn.proj", theirs + "attn.c_proj", Transform::kTranspose);
    add_pair(e, ours + "ln_2", theirs + "ln_2");
    add_pair(e, ours + "mlp.fc", theirs + "mlp.c_fc", Transform::kTranspose);
    add_pair(e, ours + "mlp.proj", theirs + "mlp.c_proj", Transform::kTranspose);
  }
  add_pair(e, "ln_f", "ln_f");
  if (c.is_classifier()) {
    e.push_back({"head.weight", {"score.weight"}, Transform::kCopy, true, true});
    if (c.head_bias) e.push_back({"head.bias", {"score.bias"}, Transform::kCopy, true, true});
  }
  return e;
}

std::vector<Entry> bert_entries(const nn::TransformerConfig& c) {
  std::vector<Entry> e{{"wte.weight", {"embeddings.word_embeddings.weight"}},
                       {"wpe.weight", {"embeddings.position_embeddings.weight"}},
                       {"wtt.weight", {"embeddings.token_type_embeddings.weight"}}};
  add_pair(e, "ln_emb", "embeddings.LayerNorm");
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string ours = "h." + std::to_string(i) + ".";
    const std::string theirs = "encoder.layer." + std::to_string(i) + ".";
    const std::string self = theirs + "attention.self.";
    for (const char* kind : {"weight", "bias"}) {
      const std::string k = kind;
      e.push_back({ours + "attn.qkv." + k,
                   {self + "query." + k, self + "key." + k, self + "value." + k},
                   Transform::kStackRows});
    }
    add_pair(e, ours + "attn.proj", theirs + "attention.output.dense");
    add_pair(e, ours + "ln_1", theirs + "attention.output.LayerNorm");
    add_pair(e, ours + "mlp.fc", theirs + "intermediate.dense");
    add_pair(e, ours + "mlp.proj", theirs + "output.dense");
    add_pair(e, ours + "ln_2", theirs + "output.LayerNorm");
  }
  if (c.is_classifier()) {
    if (c.pooler) {
      for (const char* kind : {".weight", ".bias"}) {
        e.push_back({std::string("pooler") + kind,
                     {std::string("pooler.dense") + kind},
                     Transform::kCopy,
                     false,
                     true});
      }
    }
    e.push_back({"head.weight", {"classifier.weight"}, Transform::kCopy, true, true});
    if (c.head_bias) e.push_back({"head.bias", {"classifier.bias"}, Transform::kCopy, true, true});
  }
  return e;
}

std::vector<Entry> hf_entries(const nn::TransformerConfig& c) {
  LS_CHECK(!is_gpt2(c) || !c.token_types,
           "a GPT-2 layout model has no token-type embeddings; "
           "Hugging Face GPT-2 files cannot hold them");
  return is_gpt2(c) ? gpt2_entries(c) : bert_entries(c);
}

// Tensors a Hugging Face file may hold that lockstep's model has no use for (BERT's pooler only
// when the model is not a classifier: a classifier's head expects the pooled, tanh'd state).
bool skippable(const std::string& name, const nn::TransformerConfig& c) {
  auto ends_with = [&](std::string_view s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  auto has = [&](std::string_view s) { return name.find(s) != std::string::npos; };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || name == "lm_head.weight" ||
         ends_with("position_ids") || (has("pooler.") && !c.is_classifier()) ||
         name.rfind("cls.", 0) == 0;
}

std::vector<float> to_f32(const SafetensorsTensor& t, const std::string& file) {
  const size_t n = t.data.size() / safetensors_dtype_size(t.dtype);
  std::vector<float> out(n);
  const std::byte* p = t.data.data();
  switch (t.dtype) {
    case SafetensorsDType::kF32: std::memcpy(out.data(), p, n * sizeof(float)); break;
    case SafetensorsDType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      break;
    case SafetensorsDType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
        float v;
        if (exp == 0) {
          v = std::ldexp(static_cast<float>(man), -24);  // zero or subnormal
        } else if (exp == 31) {
          v = man == 0 ? INFINITY : NAN;
        } else {
          v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
        }
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        bits |= sign;
        std::memcpy(&out[i], &bits, 4);
      }
      break;
    default:
      LS_THROW(file, ": tensor '", t.name, "' has dtype ", safetensors_dtype_name(t.dtype),
               "; lockstep reads F32, BF16 and F16 weights");
  }
  return out;
}

std::string shape_text(const std::vector<int64_t>& s) {
  return shape_str(Shape(s.begin(), s.end()));
}

// Our parameters' names and shapes, from a model built only to declare them.
std::map<std::string, std::vector<int64_t>> parameter_shapes(const nn::TransformerConfig& c) {
  nn::Transformer model(c);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (Parameter* p : model.parameters()) shapes[p->name] = {p->shape.begin(), p->shape.end()};
  return shapes;
}

std::vector<float> transpose(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  }
  return out;
}

// The file-side shape of each part of entry `e` for our shape `ours`.
std::vector<int64_t> their_shape(const Entry& e, const std::vector<int64_t>& ours) {
  switch (e.transform) {
    case Transform::kCopy: return ours;
    case Transform::kTranspose: return {ours[1], ours[0]};
    case Transform::kStackRows: {
      std::vector<int64_t> part = ours;
      part[0] /= static_cast<int64_t>(e.theirs.size());
      return part;
    }
  }
  return ours;
}

}  // namespace

std::string hf_model_type(const nn::TransformerConfig& config) {
  return is_gpt2(config) ? "gpt2" : "bert";
}

nn::TransformerConfig read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  LS_CHECK_IO(in.good(), "cannot open ", path,
              "; --init needs a Hugging Face model directory "
              "(config.json and model.safetensors, as save_pretrained writes them)");
  std::stringstream text;
  text << in.rdbuf();
  const JsonValue json = parse_json(text.str(), path);
  auto number = [&](const char* key, int64_t fallback) -> int64_t {
    const JsonValue* v = json.find(key);
    if (v == nullptr || v->is_null()) {
      LS_CHECK_IO(fallback >= 0, path, ": missing \"", key, "\"");
      return fallback;
    }
    return v->as_int64();
  };
  auto real = [&](const char* key, double fallback) {
    const JsonValue* v = json.find(key);
    return v == nullptr || v->is_null() ? fallback : v->as_double();
  };
  auto text_of = [&](const char* key, const char* fallback) {
    const JsonValue* v = json.find(key);
    return v == nullptr || v->is_null() ? std::string(fallback) : v->as_string();
  };
  const std::string type = text_of("model_type", "");
  // Options that change the forward pass in ways lockstep's model does not: refused by name
  // rather than silently computing another function.
  auto refuse_unless = [&](const char* key, const std::string& supported) {
    const JsonValue* v = json.find(key);
    if (v == nullptr || v->is_null()) return;
    std::string value = v->is_string() ? v->as_string()
                        : v->is_bool() ? (v->as_bool() ? "true" : "false")
                                       : v->number_text();
    LS_CHECK_IO(value == supported, path, ": \"", key, "\": ", value,
                " is not supported (lockstep computes the model with ", supported, ")");
  };
  nn::TransformerConfig c;
  std::string act;
  if (type == "gpt2") {
    c = nn::gpt_config(number("n_layer", -1), number("n_head", -1), number("n_embd", -1),
                       number("n_positions", -1), number("vocab_size", -1));
    c.ffn = number("n_inner", 4 * c.hidden);
    c.layernorm_eps = static_cast<float>(real("layer_norm_epsilon", 1e-5));
    act = text_of("activation_function", "gelu_new");
    refuse_unless("scale_attn_weights", "true");
    refuse_unless("scale_attn_by_inverse_layer_idx", "false");
    refuse_unless("reorder_and_upcast_attn", "false");
    refuse_unless("tie_word_embeddings", "true");
    c.pad_id = static_cast<int32_t>(number("pad_token_id", number("eos_token_id", 0)));
  } else if (type == "bert") {
    c = nn::bert_config(number("num_hidden_layers", -1), number("num_attention_heads", -1),
                        number("hidden_size", -1), number("max_position_embeddings", -1),
                        number("vocab_size", -1));
    c.ffn = number("intermediate_size", 4 * c.hidden);
    c.layernorm_eps = static_cast<float>(real("layer_norm_eps", 1e-12));
    c.token_type_count = number("type_vocab_size", 2);
    act = text_of("hidden_act", "gelu");
    refuse_unless("position_embedding_type", "absolute");
    refuse_unless("is_decoder", "false");
    c.pad_id = static_cast<int32_t>(number("pad_token_id", 0));
  } else {
    LS_THROW_AS(ErrorKind::kIo, path, ": model_type \"", type,
                "\" is not one lockstep reads; it reads gpt2 and bert");
  }
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.gelu = nn::GeluForm::kTanh;
  } else if (act == "gelu") {
    c.gelu = nn::GeluForm::kErf;
  } else {
    LS_THROW_AS(ErrorKind::kIo, path, ": activation \"", act,
                "\" is not supported; lockstep has gelu (erf) and gelu_new (tanh)");
  }
  c.validate();
  return c;
}

HostTensors read_hf_weights(const std::string& dir, const nn::TransformerConfig& config,
                            std::vector<std::string>* notes) {
  const std::string path = dir + "/model.safetensors";
  const SafetensorsFile file = read_safetensors(path);
  const std::string prefix = backbone_prefix(config);
  const auto shapes = parameter_shapes(config);
  std::set<std::string> used;
  std::vector<std::string> missing, wrong_shape;
  HostTensors out;
  for (const Entry& e : hf_entries(config)) {
    const std::vector<int64_t>& ours = shapes.at(e.ours);
    const std::vector<int64_t> want = their_shape(e, ours);
    std::vector<const SafetensorsTensor*> parts;
    for (const std::string& name : e.theirs) {
      const SafetensorsTensor* t = e.head ? nullptr : file.find(prefix + name);
      if (t == nullptr) t = file.find(name);
      if (t == nullptr) {
        missing.push_back(e.head ? name : prefix + name);
        continue;
      }
      if (t->shape != want) {
        wrong_shape.push_back(t->name + " is " + shape_text(t->shape) + ", expected " +
                              shape_text(want));
      }
      used.insert(t->name);
      parts.push_back(t);
    }
    if (parts.size() != e.theirs.size()) {
      if (e.optional && parts.empty()) {  // fine-tuning a model that had no head: keep it fresh
        missing.pop_back();
        if (notes) notes->push_back(e.ours + " not in " + path + ": freshly initialised");
      }
      continue;
    }
    if (!wrong_shape.empty()) continue;
    HostTensor t{ours, {}};
    for (const SafetensorsTensor* part : parts) {
      std::vector<float> v = to_f32(*part, path);
      if (e.transform == Transform::kTranspose) v = transpose(v, want[0], want[1]);
      t.values.insert(t.values.end(), v.begin(), v.end());
    }
    out[e.ours] = std::move(t);
  }
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > 8) s += ", ... (" + std::to_string(names.size()) + " in all)";
    return s;
  };
  LS_CHECK_IO(wrong_shape.empty(), path, ": tensors do not fit the ", config.describe(), ": ",
              list(wrong_shape),
              "; check config.json (or --layers/--hidden/--heads/--seq) against the file");
  LS_CHECK_IO(missing.empty(), path, " lacks tensors a ", hf_model_type(config),
              " model of this config needs: ", list(missing), "; is it a ", hf_model_type(config),
              " checkpoint with ", config.layers, " layers?");
  std::vector<std::string> unknown;
  for (const SafetensorsTensor& t : file.tensors()) {
    if (!used.count(t.name) && !skippable(t.name, config)) unknown.push_back(t.name);
  }
  LS_CHECK_IO(unknown.empty(), path, " holds tensors a ", hf_model_type(config),
              " model of this config has no place for: ", list(unknown), "; is it a ",
              hf_model_type(config), " checkpoint, with ", config.layers, " layers?");
  return out;
}

void write_hf(const std::string& dir, const nn::TransformerConfig& config,
              const HostTensors& weights) {
  const std::string prefix = backbone_prefix(config);
  // Owned buffers for the transposed and split tensors; spans into them go to the writer.
  std::vector<std::vector<float>> buffers;
  std::vector<NamedHostTensor> tensors;
  for (const Entry& e : hf_entries(config)) {
    auto it = weights.find(e.ours);
    LS_CHECK(it != weights.end(), "write_hf: no values for parameter ", e.ours,
             "; pass every parameter of the ", config.describe());
    const HostTensor& ours = it->second;
    const std::vector<int64_t> want = their_shape(e, ours.shape);
    const size_t part = ours.values.size() / e.theirs.size();
    for (size_t k = 0; k < e.theirs.size(); ++k) {
      std::vector<float> v(ours.values.begin() + static_cast<std::ptrdiff_t>(k * part),
                           ours.values.begin() + static_cast<std::ptrdiff_t>((k + 1) * part));
      if (e.transform == Transform::kTranspose) v = transpose(v, ours.shape[0], ours.shape[1]);
      buffers.push_back(std::move(v));
      const std::vector<float>& b = buffers.back();
      tensors.push_back({(e.head ? "" : prefix) + e.theirs[k], SafetensorsDType::kF32, want,
                         std::as_bytes(std::span<const float>(b))});
    }
  }
  std::filesystem::create_directories(dir);
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});

  const nn::TransformerConfig& c = config;
  std::ostringstream j;
  j.precision(9);
  if (is_gpt2(c)) {
    j << "{\"model_type\": \"gpt2\", \"architectures\": [\""
      << (c.is_classifier() ? "GPT2ForSequenceClassification" : "GPT2LMHeadModel")
      << "\"], \"vocab_size\": " << c.vocab << ", \"n_positions\": " << c.max_seq
      << ", \"n_embd\": " << c.hidden << ", \"n_layer\": " << c.layers
      << ", \"n_head\": " << c.heads << ", \"n_inner\": " << c.ffn
      << ", \"activation_function\": \"" << (c.gelu == nn::GeluForm::kTanh ? "gelu_new" : "gelu")
      << "\", \"layer_norm_epsilon\": " << c.layernorm_eps << ", \"resid_pdrop\": " << c.dropout
      << ", \"embd_pdrop\": " << c.dropout << ", \"attn_pdrop\": " << c.dropout;
  } else {
    j << "{\"model_type\": \"bert\", \"architectures\": [\""
      << (c.is_classifier() ? "BertForSequenceClassification" : "BertModel")
      << "\"], \"vocab_size\": " << c.vocab << ", \"max_position_embeddings\": " << c.max_seq
      << ", \"hidden_size\": " << c.hidden << ", \"num_hidden_layers\": " << c.layers
      << ", \"num_attention_heads\": " << c.heads << ", \"intermediate_size\": " << c.ffn
      << ", \"hidden_act\": \"" << (c.gelu == nn::GeluForm::kErf ? "gelu" : "gelu_new")
      << "\", \"layer_norm_eps\": " << c.layernorm_eps
      << ", \"type_vocab_size\": " << c.token_type_count
      << ", \"hidden_dropout_prob\": " << c.dropout
      << ", \"attention_probs_dropout_prob\": " << c.dropout;
  }
  j << ", \"pad_token_id\": " << c.pad_id;
  if (c.eos_id >= 0) j << ", \"bos_token_id\": " << c.eos_id << ", \"eos_token_id\": " << c.eos_id;
  if (c.is_classifier()) j << ", \"num_labels\": " << c.classes;
  j << "}\n";
  const std::string text = j.str();
  write_file_atomic(dir + "/config.json", std::as_bytes(std::span<const char>(text)));
}

HostTensors read_lockstep_weights(const std::string& path) {
  const std::string file_path =
      std::filesystem::is_directory(path) ? path + "/model.safetensors" : path;
  const SafetensorsFile file = read_safetensors(file_path);
  HostTensors out;
  for (const SafetensorsTensor& t : file.tensors()) out[t.name] = {t.shape, to_f32(t, file_path)};
  return out;
}

}  // namespace ls::checkpoint
