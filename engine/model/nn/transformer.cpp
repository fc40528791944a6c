// The transformer models (see engine/model/nn/transformer.h).
#include "engine/model/nn/transformer.h"

#include <sstream>
#include <tuple>

#include <lockstep/error.h>
#include <lockstep/nn/functional.h>

namespace ls::nn {

// ---- config ----------------------------------------------------------------------------------

void TransformerConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    LS_CHECK(v > 0, "transformer config: ", name, " is ", v, "; it must be positive");
  };
  positive(vocab, "vocab");
  positive(max_seq, "max_seq (--seq)");
  positive(layers, "layers (--layers)");
  positive(heads, "heads (--heads)");
  positive(hidden, "hidden (--hidden)");
  positive(ffn, "ffn (--ffn)");
  LS_CHECK(hidden % heads == 0, "transformer config: hidden ", hidden, " does not divide by heads ",
           heads, "; pick a hidden size that is a multiple of it");
  LS_CHECK(dropout >= 0.0f && dropout < 1.0f, "transformer config: dropout ", dropout,
           " must be in [0, 1)");
  LS_CHECK(layernorm_eps > 0.0f, "transformer config: layernorm_eps must be positive");
  LS_CHECK(pad_id >= 0 && pad_id < vocab, "transformer config: pad id ", pad_id,
           " is outside the vocabulary of ", vocab);
  LS_CHECK(pad_vocab_multiple >= 1, "transformer config: pad_vocab_multiple is ",
           pad_vocab_multiple, "; use 1 to pad nothing, or a multiple such as 128");
  LS_CHECK(classes >= 0, "transformer config: classes is ", classes,
           "; use 0 for a language model or the number of classes");
  LS_CHECK(!hidden_states || classes == 0, "transformer config: hidden_states returns the "
           "encoder's hidden states, so it has no classifier head; set classes to 0 (", classes,
           ") and add your own head");
  LS_CHECK(!token_types || token_type_count > 0,
           "transformer config: token_type_count must be "
           "positive when token types are on");
}

std::string TransformerConfig::describe() const {
  std::ostringstream s;
  s << (is_classifier() ? "classifier" : hidden_states ? "encoder" : "language model") << " ("
    << (norm == NormPlacement::kPre ? "GPT-2" : "BERT") << " layout): " << layers << " layers, "
    << heads << " heads, hidden " << hidden << ", ffn " << ffn << ", seq " << max_seq << ", vocab "
    << vocab;
  if (is_classifier()) s << ", " << classes << " classes";
  if (dropout > 0.0f) s << ", dropout " << dropout;
  return s.str();
}

int64_t TransformerConfig::parameter_count() const {
  const int64_t c = hidden;
  int64_t n = vocab * c + max_seq * c;
  if (token_types) n += token_type_count * c;
  n += 2 * c;  // ln_emb (post-norm) or ln_f (pre-norm)
  const int64_t block =
      2 * 2 * c + (3 * c * c + 3 * c) + (c * c + c) + (ffn * c + ffn) + (c * ffn + c);
  n += layers * block;
  if (is_classifier()) n += classes * c + (head_bias ? classes : 0) + (pooler ? c * c + c : 0);
  return n;
}

double TransformerConfig::train_flops_per_token(int64_t seq) const {
  // 6 FLOPs per weight per token (2 forward, 4 backward), plus attention's two GEMMs per layer
  // (2 * seq * hidden each way forward, so 12 * seq * hidden per layer for forward + backward).
  const double weights = static_cast<double>(parameter_count() - max_seq * hidden);
  return 6.0 * weights + 12.0 * static_cast<double>(layers * seq * hidden);
}

TransformerConfig gpt_config(int64_t layers, int64_t heads, int64_t hidden, int64_t max_seq,
                             int64_t vocab) {
  TransformerConfig c;
  c.layers = layers;
  c.heads = heads;
  c.hidden = hidden;
  c.ffn = 4 * hidden;
  c.max_seq = max_seq;
  c.vocab = vocab;
  return c;
}

TransformerConfig bert_config(int64_t layers, int64_t heads, int64_t hidden, int64_t max_seq,
                              int64_t vocab) {
  TransformerConfig c = gpt_config(layers, heads, hidden, max_seq, vocab);
  c.causal = false;
  c.norm = NormPlacement::kPost;
  c.gelu = GeluForm::kErf;
  c.layernorm_eps = 1e-12f;
  c.token_types = true;
  c.pooling = Pooling::kFirst;
  c.pooler = true;
  return c;
}

// ---- layers ----------------------------------------------------------------------------------

Embedding::Embedding(int64_t count, int64_t dim)
    : weight_(register_parameter("weight", {count, dim}, Init::normal(0.02f))) {}

Var Embedding::forward(Tape& tape, const Var& ids) {
  return embedding(tape, tape.parameter(weight_), ids->value);
}

LayerNorm::LayerNorm(int64_t dim, float eps)
    : eps_(eps),
      weight_(register_parameter("weight", {dim}, Init::ones())),
      bias_(register_parameter("bias", {dim}, Init::zeros())) {}

Var LayerNorm::forward(Tape& tape, const Var& x) {
  return layernorm(tape, x, tape.parameter(weight_), tape.parameter(bias_), eps_);
}

Var LayerNorm::forward_to_products(Tape& tape, const Var& x) {
  return layernorm(tape, x, tape.parameter(weight_), tape.parameter(bias_), eps_,
                   /*bf16_output=*/true);
}

std::pair<Var, Var> LayerNorm::forward_after_add(Tape& tape, const Var& x, const Var& branch,
                                                 bool to_products) {
  return add_layernorm(tape, x, branch, tape.parameter(weight_), tape.parameter(bias_), eps_,
                       to_products);
}

// Dropout sites: one per dropout layer of the model, so no two layers share a mask.
namespace {
constexpr uint64_t kEmbeddingSite = 1;
uint64_t block_site(int64_t layer, uint64_t k) { return 16 + 4 * static_cast<uint64_t>(layer) + k; }
}  // namespace

// Attention and MLP sub-layers with their residual connections and LayerNorms.
class TransformerBlock final : public Module {
 public:
  TransformerBlock(const TransformerConfig& c, int64_t layer)
      : config_(c),
        layer_(layer),
        ln_1_(register_module("ln_1", std::make_unique<LayerNorm>(c.hidden, c.layernorm_eps))),
        qkv_(attn_module().add_linear("qkv", c.hidden, 3 * c.hidden)),
        proj_(attn_module().add_linear("proj", c.hidden, c.hidden)),
        ln_2_(register_module("ln_2", std::make_unique<LayerNorm>(c.hidden, c.layernorm_eps))),
        fc_(mlp_module().add_linear("fc", c.hidden, c.ffn)),
        mlp_proj_(mlp_module().add_linear("proj", c.ffn, c.hidden)) {}

  Var forward(Tape&, const Var&) override {
    LS_THROW(
        "a TransformerBlock needs its sequence shape and padding mask; "
        "call forward(tape, x, valid, shape)");
  }

  Var forward(Tape& tape, Var x, const Tensor& valid, const AttentionShape& shape) {
    const int64_t row_len = shape.seq * config_.hidden;
    const float p = config_.dropout;
    const bool pre = config_.norm == NormPlacement::kPre;
    Var a = attention(tape, qkv_.forward(tape, pre ? ln_1_.forward_to_products(tape, x) : x), valid,
                      shape, p, block_site(layer_, 0));
    a = dropout(tape, proj_.forward(tape, a), p, block_site(layer_, 1), row_len);
    // The residual add inside the norm that reads its sum (nn::add_layernorm): pre-norm, ln_2
    // (the sum stays the residual stream); post-norm, ln_1 (the norm is). A pre-norm block's
    // second sum is read by the next block's ln_1, across the block (the recompute unit): that
    // add stays its own kernel.
    Var mlp_in;
    if (pre) {
      std::tie(x, mlp_in) = ln_2_.forward_after_add(tape, x, a, /*to_products=*/true);
    } else {
      x = mlp_in = ln_1_.forward_after_add(tape, x, a, /*to_products=*/false).second;
    }
    // In use order (arguments' order of evaluation is unspecified): ZeRO-3 gathers parameters
    // as the tape asks for them, and the layer norm came first.
    const Var fc_w = tape.parameter(fc_.weight()), fc_b = tape.parameter(*fc_.bias());
    const Var proj_w = tape.parameter(mlp_proj_.weight());
    const Var proj_b = tape.parameter(*mlp_proj_.bias());
    Var m = mlp(tape, mlp_in, fc_w, fc_b, proj_w, proj_b, config_.gelu == GeluForm::kErf);
    m = dropout(tape, m, p, block_site(layer_, 2), row_len);
    if (pre) return add(tape, x, m);
    return ln_2_.forward_after_add(tape, x, m, /*to_products=*/false).second;
  }

 private:
  // A named group of Linear layers ("attn", "mlp"), so parameter names read h.0.attn.qkv.weight.
  class Group final : public Module {
   public:
    Linear& add_linear(std::string name, int64_t in, int64_t out) {
      return register_module(std::move(name), std::make_unique<Linear>(in, out));
    }
    Var forward(Tape&, const Var&) override { LS_THROW("a layer group has no forward of its own"); }
  };
  Group& attn_module() {
    if (attn_ == nullptr) attn_ = &register_module("attn", std::make_unique<Group>());
    return *attn_;
  }
  Group& mlp_module() {
    if (mlp_ == nullptr) mlp_ = &register_module("mlp", std::make_unique<Group>());
    return *mlp_;
  }

  TransformerConfig config_;
  int64_t layer_;
  Group* attn_ = nullptr;
  Group* mlp_ = nullptr;
  LayerNorm& ln_1_;
  Linear& qkv_;
  Linear& proj_;
  LayerNorm& ln_2_;
  Linear& fc_;
  Linear& mlp_proj_;
};

// ---- the model -------------------------------------------------------------------------------

Transformer::Transformer(const TransformerConfig& config) : config_(config) {
  config_.validate();
  const TransformerConfig& c = config_;
  wte_ = &register_module("wte", std::make_unique<Embedding>(c.vocab, c.hidden));
  if (!c.is_classifier() && !c.hidden_states) {  // the tied head multiplies it padded
    const int64_t m = c.pad_vocab_multiple;
    wte_->weight().padded_rows = (c.vocab + m - 1) / m * m;
  }
  wpe_ = &register_module("wpe", std::make_unique<Embedding>(c.max_seq, c.hidden));
  if (c.token_types) {
    wtt_ = &register_module("wtt", std::make_unique<Embedding>(c.token_type_count, c.hidden));
  }
  if (c.norm == NormPlacement::kPost) {
    ln_emb_ = &register_module("ln_emb", std::make_unique<LayerNorm>(c.hidden, c.layernorm_eps));
  }
  auto& h = register_module("h", std::make_unique<Sequential>());
  for (int64_t i = 0; i < c.layers; ++i) {
    auto block = std::make_unique<TransformerBlock>(c, i);
    blocks_.push_back(block.get());
    h.add(std::move(block));
  }
  if (c.norm == NormPlacement::kPre) {
    ln_f_ = &register_module("ln_f", std::make_unique<LayerNorm>(c.hidden, c.layernorm_eps));
  }
  if (c.is_classifier()) {
    if (c.pooler)
      pooler_ = &register_module("pooler", std::make_unique<Linear>(c.hidden, c.hidden));
    head_ = &register_module("head", std::make_unique<Linear>(c.hidden, c.classes, c.head_bias));
  }
}

Transformer::~Transformer() = default;

Var Transformer::embed(Tape& tape, const Tensor& tokens) {
  const int64_t t = tokens.dim(1);
  Var x = embedding(tape, tape.parameter(wte_->weight()), tokens);
  x = add_table_rows(tape, x, tape.parameter(wpe_->weight()), t);
  if (wtt_ != nullptr) x = add_table_rows(tape, x, tape.parameter(wtt_->weight()), 1);
  if (ln_emb_ != nullptr) x = ln_emb_->forward(tape, x);
  return dropout(tape, x, config_.dropout, kEmbeddingSite, t * config_.hidden);
}

Var Transformer::block(Tape& tape, size_t index, const Var& x, const Tensor& tokens,
                       const Tensor& valid) {
  const AttentionShape shape{tokens.dim(0), tokens.dim(1), config_.heads, config_.causal};
  // Right padding cannot reach a real token through causal attention, so only a bidirectional
  // model masks padding keys. (GPT-2 files often make the pad id the end-of-text id, which packed
  // language-model data uses as a separator: it must stay visible.)
  const Tensor key_valid = config_.causal ? Tensor() : valid;
  const std::string name = "h." + std::to_string(index);
  tape.begin_layer(name);
  TransformerBlock* b = blocks_[index];
  Var out = tape.recomputable(x, [b, key_valid, shape](Tape& t, const Var& in) {
    return b->forward(t, in, key_valid, shape);
  });
  tape.end_layer(name);
  return out;
}

Var Transformer::encode(Tape& tape, const Tensor& tokens, const Tensor& valid) {
  Var x = embed(tape, tokens);
  for (size_t i = 0; i < blocks_.size(); ++i) x = block(tape, i, x, tokens, valid);
  if (ln_f_ != nullptr) x = ln_f_->forward(tape, x);
  return x;
}

namespace {
Tensor check_tokens(const Var& tokens, const TransformerConfig& c) {
  const Tensor& ids = tokens->value;
  LS_CHECK(ids.dtype() == DType::kI32 && ids.ndim() == 2 && ids.dim(0) > 0 && ids.dim(1) > 0,
           "transformer input is ", ids.describe(),
           "; expected token ids, i32 [batch, seq] (a token data set, not images)");
  LS_CHECK(ids.dim(1) <= c.max_seq, "sequences of ", ids.dim(1),
           " tokens exceed the model's max_seq ", c.max_seq, "; raise --seq or cut the data");
  return ids;
}
}  // namespace

Tensor Transformer::valid_mask(Tape& tape, const Tensor& ids) const {
  // Needed by key masks (bidirectional models) and pooling (classifiers) only.
  if (config_.causal && !config_.is_classifier()) return Tensor();
  return padding_mask(tape, ids, config_.pad_id);
}

Var Transformer::hidden_states(Tape& tape, const Var& tokens) {
  const Tensor ids = check_tokens(tokens, config_);
  return encode(tape, ids, valid_mask(tape, ids));
}

Var Transformer::forward(Tape& tape, const Var& tokens) {
  const Tensor ids = check_tokens(tokens, config_);
  const Tensor valid = valid_mask(tape, ids);
  tape.begin_layer("embeddings");
  Var x = embed(tape, ids);
  tape.end_layer("embeddings");
  for (size_t i = 0; i < blocks_.size(); ++i) x = block(tape, i, x, ids, valid);
  tape.begin_layer("head");
  x = head(tape, x, ids, valid);
  tape.end_layer("head");
  return x;
}

Var Transformer::head(Tape& tape, Var x, const Tensor& tokens, const Tensor& valid) {
  if (ln_f_ != nullptr) {
    // Only the tied head's product reads it there (hidden states and classifiers read more).
    const bool to_products = !config_.hidden_states && !config_.is_classifier();
    x = to_products ? ln_f_->forward_to_products(tape, x) : ln_f_->forward(tape, x);
  }
  if (config_.hidden_states) return x;
  if (!config_.is_classifier()) {  // the tied head: logits = x wte^T
    // In bf16 with the engine's cross-entropy, the [rows, vocab] logits are written in bf16 only.
    if (tape.context().logits_in_bf16) {
      return linear_bf16_output(tape, x, tape.parameter(wte_->weight()));
    }
    return linear(tape, x, tape.parameter(wte_->weight()), nullptr);
  }
  Var pooled = pool(tape, x, valid, config_.pooling, tokens.dim(0), tokens.dim(1));
  if (pooler_ != nullptr) pooled = tanh(tape, pooler_->forward(tape, pooled));
  return head_->forward(tape, pooled);
}

std::vector<PipelineLayer> Transformer::pipeline_layers() {
  const std::vector<Parameter*> all = parameters();
  std::vector<PipelineLayer> out;
  std::vector<Parameter*> embeddings;
  for (const char* prefix : {"wte.", "wpe.", "wtt.", "ln_emb."}) {
    for (Parameter* p : parameters_under(all, prefix)) embeddings.push_back(p);
  }
  // Every layer computes the padding mask it needs from the token ids, as forward() does once.
  out.push_back({"embeddings", embeddings, [this](Tape& tape, const Var&, const Var& tokens) {
                   return embed(tape, check_tokens(tokens, config_));
                 }});
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const std::string name = "h." + std::to_string(i);
    out.push_back({name, parameters_under(all, name + "."),
                   [this, i](Tape& tape, const Var& x, const Var& tokens) {
                     return block(tape, i, x, tokens->value, valid_mask(tape, tokens->value));
                   }});
  }
  std::vector<Parameter*> head_parameters;
  if (!config_.is_classifier() && !config_.hidden_states) {
    head_parameters.push_back(&wte_->weight());  // tied
  }
  for (const char* prefix : {"ln_f.", "pooler.", "head."}) {
    for (Parameter* p : parameters_under(all, prefix)) head_parameters.push_back(p);
  }
  out.push_back({"head", head_parameters, [this](Tape& tape, const Var& x, const Var& tokens) {
                   return head(tape, x, tokens->value, valid_mask(tape, tokens->value));
                 }});
  return out;
}

}  // namespace ls::nn
