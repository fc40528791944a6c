// What lockstep-train and lockstep-scale train: a model and its data set, chosen by flags.
//
//   mlp         Fashion-MNIST images, an MLP (--hidden widths)
//   gpt         a GPT-2-layout language model on dict-gcide's English text (byte tokens unless
//               --tokenizer names a GPT-2 BPE vocabulary), next-token loss
//   classifier  an encoder + linear head on WordNet noun glosses, 4 supersense classes (animal,
//               artifact, food, plant); GPT-2 layout with last-real-token pooling by default,
//               BERT's with --layout bert; --init starts from a Hugging Face checkpoint
//   bag-of-bytes the classifier's baseline: logistic regression on the byte frequencies of the
//               same WordNet glosses (same split, same first --seq bytes)
// Each model's data defaults to its installed Debian package, so `--model gpt` runs as is.
// Errors (missing files, bad sizes) are ls::Error with the path and the fix.
#pragma once

#include <lockstep/lockstep.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

struct WorkloadOptions {
  std::string model = "mlp";    // mlp | gpt | classifier | bag-of-bytes
  std::string data;             // empty: the model's installed data set
  std::vector<int64_t> hidden;  // mlp: hidden widths; transformers: {hidden size}
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t seq = 128;
  float dropout = 0.0f;
  std::string layout = "gpt2";  // classifier: gpt2 | bert
  std::string pooling;          // classifier: last | first | mean (default by layout)
  std::string init;             // Hugging Face model directory to start from
  std::string tokenizer;        // directory with GPT-2's vocab.json and merges.txt
  int64_t max_examples = 0;     // > 0: cap the training examples (quick runs)
  // > 0: evaluate on the first N test examples; 0: gpt 512 of its held-out tail, others all.
  int64_t eval_examples = 0;
};

struct Workload {
  std::string description;  // one line for the log
  ls::data::Dataset train, test;
  ls::ModelFactory model;
  int64_t tokens_per_example = 0;  // sequence models: for tokens/s; 0 for the MLP
  std::optional<ls::nn::TransformerConfig> transformer;
  std::vector<int64_t> mlp_widths;  // the MLP's widths, input to output
  std::vector<std::string> notes;   // things to tell the user (a head initialised fresh, ...)
};

Workload make_workload(const WorkloadOptions& options);
// "mlp, gpt, classifier": for usage errors.
const char* workload_models();
