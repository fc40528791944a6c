// Transformers: a GPT-style language model and an encoder + linear head classifier, one class
// (internal; applications configure it through lockstep/transformer_config.h).
//
// Input: token ids, i32 [B, T] with T <= max_seq; tokens equal to pad_id are padding, skipped
// by pooling and, in a bidirectional model, masked as attention keys (a causal model needs no
// mask for right padding: no real token can attend to a later position). Output: logits [B*T,
// vocab] for a language model (the output head is the token embedding, tied as in GPT-2), [B,
// classes] for a classifier (an encoder stack, pooling over the sequence, then a Linear head).
// Layouts: GPT-2's (pre-norm blocks and a final LayerNorm, tanh GELU) and BERT's (post-norm, a
// LayerNorm after the embeddings, token-type embeddings, erf GELU). Last-token pooling takes each
// sequence's last real token by its padding mask, not position T-1 (see docs/transformers.md).
// Parameter names (our own, lockstep/hf_transformer.h maps them to Hugging Face's):
//   wte.weight, wpe.weight, [wtt.weight, ln_emb.*], h.<i>.{ln_1, attn.qkv, attn.proj, ln_2,
//   mlp.fc, mlp.proj}.{weight, bias}, [ln_f.*], [pooler.*], [head.weight, head.bias].
// Thread-safety: a model is used by one thread (each replica owns its own).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/nn/module.h>
#include <lockstep/transformer_config.h>

namespace ls::nn {

class Embedding final : public Module {
 public:
  Embedding(int64_t count, int64_t dim);             // N(0, 0.02) init, as GPT-2 and BERT
  Var forward(Tape& tape, const Var& ids) override;  // ids: i32 tensor of n -> [n, dim]
  Parameter& weight() { return weight_; }

 private:
  Parameter& weight_;
};

class LayerNorm final : public Module {
 public:
  LayerNorm(int64_t dim, float eps);
  Var forward(Tape& tape, const Var& x) override;
  // forward for a norm whose output only feeds matrix products (a pre-norm block's, the tied
  // head's): in a bf16 step it is stored in bf16 only (nn::layernorm's bf16_output).
  Var forward_to_products(Tape& tape, const Var& x);
  // The residual add before the norm and the norm, in one pass (nn::add_layernorm): {x + branch,
  // its norm}; to_products as forward_to_products.
  std::pair<Var, Var> forward_after_add(Tape& tape, const Var& x, const Var& branch,
                                        bool to_products);

 private:
  float eps_;
  Parameter& weight_;
  Parameter& bias_;
};

class TransformerBlock;

class Transformer final : public Module {
 public:
  explicit Transformer(const TransformerConfig& config);
  ~Transformer() override;
  // tokens: a constant Var of i32 [B, T]; returns the logits (see the top of this file).
  Var forward(Tape& tape, const Var& tokens) override;
  // The final hidden states [B*T, hidden] (after ln_f in the pre-norm layout): what a Hugging
  // Face model returns as last_hidden_state.
  Var hidden_states(Tape& tape, const Var& tokens);
  // Pipeline layers: "embeddings", "h.0" ... "h.<layers-1>", "head" (ln_f, pooler and the head;
  // a language model's head is wte.weight, which the embeddings layer lists too: tied).
  std::vector<PipelineLayer> pipeline_layers() override;
  const TransformerConfig& config() const { return config_; }

 private:
  Var encode(Tape& tape, const Tensor& tokens, const Tensor& valid);
  Var embed(Tape& tape, const Tensor& tokens);
  Var block(Tape& tape, size_t index, const Var& x, const Tensor& tokens, const Tensor& valid);
  // ln_f (pre-norm) and the output head: hidden states -> logits.
  Var head(Tape& tape, Var x, const Tensor& tokens, const Tensor& valid);
  // i32 [B, T], 1 for a real token and 0 for padding; undefined when nothing needs it.
  Tensor valid_mask(Tape& tape, const Tensor& ids) const;

  TransformerConfig config_;
  Embedding* wte_;
  Embedding* wpe_;
  Embedding* wtt_ = nullptr;
  LayerNorm* ln_emb_ = nullptr;
  std::vector<TransformerBlock*> blocks_;
  LayerNorm* ln_f_ = nullptr;
  Module* pooler_ = nullptr;  // BERT's dense + tanh before the head
  Module* head_ = nullptr;
};

}  // namespace ls::nn
