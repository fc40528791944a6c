// Hugging Face checkpoints (safetensors + config.json) of GPT-2 and BERT, to and from lockstep's
// transformer (lockstep/transformer_config.h), so a user's pretrained model is fine-tuned here
// and read back by `transformers`.
//
// Names: GPT-2 as GPT2LMHeadModel / GPT2ForSequenceClassification save them
// ("transformer.h.0.attn.c_attn.weight", head "score.weight"); BERT as BertModel /
// BertForSequenceClassification ("bert.encoder.layer.0.attention.self.query.weight", head
// "classifier.weight"). Reading accepts the names with or without the "transformer." / "bert."
// prefix. GPT-2's Conv1D weights are [in, out] (transposed on the way in and out); BERT's
// separate query/key/value are stacked into one [3C, C] projection. Tensors that lockstep's
// model has no use for are skipped by name: GPT-2's attention-mask buffers (attn.bias,
// attn.masked_bias), the tied lm_head.weight, position_ids, BERT's pooler.* and pre-training
// heads cls.*. Any other unknown tensor, a missing one, or a wrong shape is an ls::Error naming
// them. A classifier head missing from the file (fine-tuning a language model) keeps its fresh
// initialisation, and read_hf_weights says so.
// Thread-safety: pure functions over files and host memory.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <lockstep/transformer_config.h>

namespace ls::checkpoint {

// A tensor in host memory, f32, row-major.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using HostTensors = std::map<std::string, HostTensor>;  // by lockstep parameter name

// "gpt2" for the GPT-2 layout (pre-norm), "bert" for BERT's (post-norm).
std::string hf_model_type(const nn::TransformerConfig& config);

// DIR/config.json (model_type gpt2 or bert) as a language-model config (classes 0; set classes
// and pooling for a classifier). pad_id: pad_token_id, else GPT-2's eos_token_id, else 0.
nn::TransformerConfig read_hf_config(const std::string& dir);

// DIR/model.safetensors as lockstep parameters of `config` (f32; bf16 and f16 files are widened).
// `notes` (optional) receives one line per thing the caller should know (a head left fresh).
HostTensors read_hf_weights(const std::string& dir, const nn::TransformerConfig& config,
                            std::vector<std::string>* notes = nullptr);

// Writes DIR/model.safetensors (Hugging Face names, f32) and DIR/config.json for `config`, from
// lockstep parameters by name (e.g. read from a lockstep checkpoint's model.safetensors with
// read_lockstep_weights). DIR is created if missing; both files are written atomically.
void write_hf(const std::string& dir, const nn::TransformerConfig& config,
              const HostTensors& weights);

// The parameters in a lockstep checkpoint's model.safetensors (a step directory or the file).
HostTensors read_lockstep_weights(const std::string& path);

}  // namespace ls::checkpoint
