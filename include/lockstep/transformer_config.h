// The configuration of lockstep's transformers (public): a GPT-2-layout language model or an
// encoder + linear head classifier (GPT-2 or BERT layout). DataParallel builds the model from
// transformer_factory(config) (lockstep/data_parallel.h); docs/transformers.md describes it.
#pragma once

#include <cstdint>
#include <string>

#include <lockstep/nn/pooling.h>

namespace ls::nn {

enum class NormPlacement { kPre, kPost };  // GPT-2: LayerNorm before each sub-layer; BERT: after
enum class GeluForm { kTanh, kErf };       // GPT-2's "gelu_new"; BERT's "gelu"

struct TransformerConfig {
  int64_t vocab = 258;  // the byte tokenizer: 256 bytes, pad, end of text
  int64_t max_seq = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t hidden = 256;
  int64_t ffn = 1024;  // inner width of each block's MLP
  bool causal = true;  // a token attends to earlier tokens only
  NormPlacement norm = NormPlacement::kPre;
  GeluForm gelu = GeluForm::kTanh;
  float dropout = 0.0f;  // embeddings, attention probabilities and residual branches
  float layernorm_eps = 1e-5f;
  int32_t pad_id = 256;
  int32_t eos_id = -1;       // end-of-text token, written to exported configs (-1: none)
  bool token_types = false;  // BERT: a token-type embedding (type 0 for every token)
  int64_t token_type_count = 2;
  int classes = 0;  // 0: a language model; > 0: a classifier with that many classes
  Pooling pooling = Pooling::kLast;  // classifier: which position(s) feed the head
  bool head_bias = true;             // GPT-2's sequence classifier ("score") has none
  // Classifier: a dense layer + tanh on the pooled state before the head, as BERT's pooler
  // (BertForSequenceClassification); bert_config turns it on.
  bool pooler = false;
  // The encoder alone (classes 0): forward returns the final hidden states [B*T, hidden] (after
  // ln_f in the pre-norm layout; Hugging Face's last_hidden_state) instead of logits, for a model
  // that adds its own head (make_transformer, lockstep/data_parallel.h). Same parameters as the
  // language model, so a language model's weights load into it.
  bool hidden_states = false;
  // A language model's bf16 training step multiplies its tied head with the vocabulary padded to
  // a multiple of this (50,257 -> 50,304 at 128): aligned rows and whole tiles for the products,
  // the extra logits masked (-infinity). Parameters, checkpoints and exports keep `vocab`; 1 pads
  // nothing. docs/gpu.md, "bf16 between ops", says why.
  int64_t pad_vocab_multiple = 128;

  bool is_classifier() const { return classes > 0; }
  int64_t head_dim() const { return hidden / heads; }
  // ls::Error naming the first bad field and how to fix it.
  void validate() const;
  std::string describe() const;  // "gpt 4 layers, 4 heads, hidden 256, ffn 1024, seq 128, ..."
  // Parameters a model of this config has (no model needed).
  int64_t parameter_count() const;
  // Training FLOPs per token (forward + backward, 6N + attention), for MFU figures.
  double train_flops_per_token(int64_t seq) const;
};

// The GPT-2 layout (pre-norm, causal, tanh GELU, tied head), and BERT's (post-norm, bidirectional,
// erf GELU, token types, first-token pooling, eps 1e-12).
TransformerConfig gpt_config(int64_t layers, int64_t heads, int64_t hidden, int64_t max_seq,
                             int64_t vocab);
TransformerConfig bert_config(int64_t layers, int64_t heads, int64_t hidden, int64_t max_seq,
                              int64_t vocab);

}  // namespace ls::nn
