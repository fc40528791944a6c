// The workloads of lockstep-train and lockstep-scale (see programs/common/workload.h).
#include "programs/common/workload.h"

#include <memory>
#include <sstream>

namespace {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
constexpr double kLmTestFraction = 0.02;  // the corpus tail held out for evaluation
constexpr int64_t kLmEvalExamples = 512;  // of which this many are evaluated by default

std::unique_ptr<ls::data::Tokenizer> make_tokenizer(const WorkloadOptions& o) {
  if (o.tokenizer.empty()) return std::make_unique<ls::data::ByteTokenizer>();
  return std::make_unique<ls::data::Gpt2BpeTokenizer>(ls::data::Gpt2BpeTokenizer::from_files(
      o.tokenizer + "/vocab.json", o.tokenizer + "/merges.txt"));
}

ls::nn::Pooling parse_pooling(const std::string& name) {
  if (name == "last") return ls::nn::Pooling::kLast;
  if (name == "first") return ls::nn::Pooling::kFirst;
  if (name == "mean") return ls::nn::Pooling::kMean;
  LS_THROW("unknown pooling '", name, "'; use last, first or mean");
}

int64_t transformer_hidden(const WorkloadOptions& o) {
  if (o.hidden.empty()) return 256;
  LS_CHECK(o.hidden.size() == 1, "--hidden takes one width for a transformer, got ",
           o.hidden.size());
  return o.hidden[0];
}

// The config from flags, or from the --init checkpoint's config.json (whose sizes win).
ls::nn::TransformerConfig transformer_config(const WorkloadOptions& o, const std::string& layout,
                                             int64_t vocab, int32_t pad_id, int32_t eos_id) {
  if (!o.init.empty()) {
    ls::nn::TransformerConfig c = ls::checkpoint::read_hf_config(o.init);
    c.eos_id = eos_id;
    LS_CHECK(o.model != "gpt" || c.causal,
             "--model gpt trains next-token prediction, which needs "
             "a causal model; ",
             o.init,
             " holds a bidirectional (BERT) one: fine-tune it with "
             "--model classifier");
    LS_CHECK(c.vocab >= vocab, "the --init model's vocabulary (", c.vocab,
             ") is smaller than the tokenizer's (", vocab, "); pass the model's --tokenizer");
    LS_CHECK(o.seq <= c.max_seq, "--seq ", o.seq, " exceeds the --init model's ", c.max_seq,
             " positions");
    c.pad_id = pad_id;
    c.dropout = o.dropout;
    return c;
  }
  const int64_t hidden = transformer_hidden(o);
  ls::nn::TransformerConfig c = layout == "bert"
                                    ? ls::nn::bert_config(o.layers, o.heads, hidden, o.seq, vocab)
                                    : ls::nn::gpt_config(o.layers, o.heads, hidden, o.seq, vocab);
  c.pad_id = pad_id;
  c.eos_id = eos_id;
  c.dropout = o.dropout;
  return c;
}

void cap_examples(ls::data::Dataset& d, int64_t max_examples) {
  if (max_examples <= 0 || d.count <= max_examples) return;
  d.count = max_examples;
  if (d.has_tokens()) d.tokens.resize(static_cast<size_t>(max_examples * d.features));
  if (!d.images.empty()) d.images.resize(static_cast<size_t>(max_examples * d.features));
  d.labels.resize(static_cast<size_t>(max_examples * d.label_width));
}

Workload mlp_workload(const WorkloadOptions& o) {
  Workload w;
  const std::string dir = o.data.empty() ? kFashionMnistDir : o.data;
  w.train = ls::data::load_fashion_mnist(dir, ls::data::Split::kTrain);
  w.test = ls::data::load_fashion_mnist(dir, ls::data::Split::kTest);
  cap_examples(w.train, o.max_examples);
  cap_examples(w.test, o.eval_examples);
  w.mlp_widths = {w.train.features};
  const std::vector<int64_t> hidden = o.hidden.empty() ? std::vector<int64_t>{256} : o.hidden;
  w.mlp_widths.insert(w.mlp_widths.end(), hidden.begin(), hidden.end());
  w.mlp_widths.push_back(w.train.classes);
  w.model = ls::mlp_factory(w.mlp_widths);
  std::ostringstream s;
  s << "mlp";
  for (size_t i = 0; i < w.mlp_widths.size(); ++i) s << (i ? "-" : " ") << w.mlp_widths[i];
  s << " on Fashion-MNIST";
  w.description = s.str();
  return w;
}

Workload transformer_workload(const WorkloadOptions& o) {
  Workload w;
  const bool lm = o.model == "gpt";
  const std::unique_ptr<ls::data::Tokenizer> tokenizer = make_tokenizer(o);
  if (lm) {
    const std::string path = o.data.empty() ? ls::data::kGcidePath : o.data;
    ls::data::DatasetSplit split = ls::data::split_tail(
        ls::data::make_lm_dataset(ls::data::load_gcide_text(path), *tokenizer, o.seq, "gcide"),
        kLmTestFraction);
    w.train = std::move(split.train);
    w.test = std::move(split.validation);
  } else {
    const std::string path = o.data.empty() ? ls::data::kWordnetNounPath : o.data;
    w.train = ls::data::load_wordnet_supersenses(*tokenizer, o.seq, ls::data::Split::kTrain, path);
    w.test = ls::data::load_wordnet_supersenses(*tokenizer, o.seq, ls::data::Split::kTest, path);
  }
  cap_examples(w.train, o.max_examples);
  cap_examples(w.test, o.eval_examples > 0 ? o.eval_examples : (lm ? kLmEvalExamples : 0));
  const std::string layout = lm ? "gpt2" : o.layout;
  LS_CHECK(layout == "gpt2" || layout == "bert", "unknown --layout '", layout,
           "'; use gpt2 or bert");
  ls::nn::TransformerConfig c = transformer_config(o, layout, tokenizer->vocab_size(),
                                                   tokenizer->pad_id(), tokenizer->eos_id());
  if (!lm) {
    c.classes = w.train.classes;
    if (!o.pooling.empty()) c.pooling = parse_pooling(o.pooling);
    // GPT-2's sequence classifier ("score") has no bias; BERT's ("classifier") has one.
    c.head_bias = c.norm == ls::nn::NormPlacement::kPost;
  }
  c.validate();
  std::shared_ptr<const ls::checkpoint::HostTensors> weights;
  if (!o.init.empty()) {
    weights = std::make_shared<const ls::checkpoint::HostTensors>(
        ls::checkpoint::read_hf_weights(o.init, c, &w.notes));
  }
  w.model = ls::transformer_factory(c, weights);
  w.transformer = c;
  w.tokens_per_example = o.seq;
  w.description = c.describe() + ", " + tokenizer->name() + " tokens, on " + w.train.name +
                  (o.init.empty() ? "" : ", from " + o.init);
  return w;
}

// Byte frequencies of each token sequence (padding left out), as float features: the
// bag-of-bytes inputs of the linear baseline.
ls::data::Dataset bag_of_bytes(const ls::data::Dataset& tokens, int32_t pad_id, int64_t vocab) {
  ls::data::Dataset out;
  out.name = tokens.name + " (bag of bytes)";
  out.count = tokens.count;
  out.features = vocab;
  out.classes = tokens.classes;
  out.labels = tokens.labels;
  out.images.assign(static_cast<size_t>(tokens.count * vocab), 0.0f);
  for (int64_t r = 0; r < tokens.count; ++r) {
    float* row = out.images.data() + r * vocab;
    int64_t n = 0;
    for (int64_t t = 0; t < tokens.features; ++t) {
      const int32_t id = tokens.tokens[static_cast<size_t>(r * tokens.features + t)];
      if (id == pad_id) continue;
      row[id] += 1.0f;
      ++n;
    }
    for (int64_t v = 0; v < vocab && n > 0; ++v) row[v] /= static_cast<float>(n);
  }
  return out;
}

Workload bag_of_bytes_workload(const WorkloadOptions& o) {
  const ls::data::ByteTokenizer bytes;
  const std::string path = o.data.empty() ? ls::data::kWordnetNounPath : o.data;
  Workload w;
  w.train =
      bag_of_bytes(ls::data::load_wordnet_supersenses(bytes, o.seq, ls::data::Split::kTrain, path),
                   bytes.pad_id(), bytes.vocab_size());
  w.test =
      bag_of_bytes(ls::data::load_wordnet_supersenses(bytes, o.seq, ls::data::Split::kTest, path),
                   bytes.pad_id(), bytes.vocab_size());
  cap_examples(w.train, o.max_examples);
  cap_examples(w.test, o.eval_examples);
  w.mlp_widths = {w.train.features, w.train.classes};  // one Linear layer: logistic regression
  w.model = ls::mlp_factory(w.mlp_widths);
  w.description = "bag-of-bytes linear baseline (byte frequencies of the first " +
                  std::to_string(o.seq) + " bytes) on WordNet supersenses";
  return w;
}

}  // namespace

const char* workload_models() { return "mlp, gpt, classifier, bag-of-bytes"; }

Workload make_workload(const WorkloadOptions& options) {
  if (options.model == "mlp") return mlp_workload(options);
  if (options.model == "bag-of-bytes") return bag_of_bytes_workload(options);
  LS_CHECK(options.model == "gpt" || options.model == "classifier", "unknown model '",
           options.model, "'; available: ", workload_models());
  return transformer_workload(options);
}
