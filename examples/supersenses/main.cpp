// The question lockstep started from, written as an application writes it: a pretrained
// transformer from a Hugging Face directory (BERT or GPT-2 layout) plus Linear(hidden, 4) on each
// sequence's last real token, fine-tuned on WordNet noun supersenses (animal, artifact, food,
// plant) on every device of the machine, with the public API only.
// Usage: supersenses HF_DIR [DEVICES (auto)] [EPOCHS (3)] [WORDNET_DATA_NOUN]
// The checkpoint must use lockstep's byte vocabulary (scripts/finetune-demo exports one); a
// Hugging Face BERT with a WordPiece vocabulary would need its tokenizer, which lockstep lacks.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include <lockstep/lockstep.h>

namespace {

class SupersenseClassifier final : public ls::nn::Module {
 public:
  SupersenseClassifier(const ls::nn::TransformerConfig& encoder,
                       std::shared_ptr<const ls::checkpoint::HostTensors> weights)
      : pad_id_(encoder.pad_id),
        encoder_(register_module("encoder", ls::make_transformer(encoder, std::move(weights)))),
        head_(register_module("head", std::make_unique<ls::nn::Linear>(encoder.hidden, 4))) {}

  ls::Var forward(ls::Tape& tape, const ls::Var& tokens) override {
    const int64_t rows = tokens->value.dim(0), seq = tokens->value.dim(1);
    ls::Var hidden = encoder_.forward(tape, tokens);  // [rows * seq, hidden]
    ls::Tensor real = ls::nn::padding_mask(tape, tokens->value, pad_id_);
    ls::Var last = ls::nn::pool(tape, hidden, real, ls::nn::Pooling::kLast, rows, seq);
    return head_.forward(tape, last);  // [rows, 4]
  }

 private:
  int32_t pad_id_;
  ls::nn::Module& encoder_;
  ls::nn::Linear& head_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 5) {
    std::fprintf(stderr, "usage: supersenses HF_DIR [DEVICES (auto)] [EPOCHS (3)] "
                         "[WORDNET_DATA_NOUN]\n");
    return 2;
  }
  try {
    const std::string dir = argv[1], devices = argc > 2 ? argv[2] : "auto";
    const int epochs = argc > 3 ? std::stoi(argv[3]) : 3;
    const std::string nouns = argc > 4 ? argv[4] : ls::data::kWordnetNounPath;
    ls::nn::TransformerConfig encoder = ls::checkpoint::read_hf_config(dir);
    encoder.hidden_states = true;  // the encoder alone: the head is ours
    auto weights = std::make_shared<const ls::checkpoint::HostTensors>(
        ls::checkpoint::read_hf_weights(dir, encoder));
    const ls::data::ByteTokenizer bytes;
    const int64_t seq = std::min<int64_t>(64, encoder.max_seq);
    const ls::data::Dataset train =
        ls::data::load_wordnet_supersenses(bytes, seq, ls::data::Split::kTrain, nouns);
    const ls::data::Dataset test =
        ls::data::load_wordnet_supersenses(bytes, seq, ls::data::Split::kTest, nouns);

    ls::DataParallel trainer(
        ls::parse_devices(devices),
        [encoder, weights] { return std::make_unique<SupersenseClassifier>(encoder, weights); },
        ls::make_optimizer_factory({"adamw", 3e-4f, 0.0f, 0.01f}));
    ls::data::Sampler sampler(train.count, /*seed=*/1);
    ls::data::BatchIterator batches(train, sampler, /*batch_size=*/32);
    ls::data::Batch batch;
    for (int epoch = 0; epoch < epochs; ++epoch, sampler.set_epoch(epoch), batches.reset()) {
      float loss = 0.0f;
      while (batches.next(batch)) loss = trainer.step(batch).loss;
      std::printf("epoch %d: last loss %.4f\n", epoch + 1, loss);
    }
    const ls::EvalResult result = trainer.evaluate(test, 256);
    std::printf("supersenses: %s + Linear(%lld, 4) on %zu device(s): test accuracy %.4f\n",
                encoder.describe().c_str(), static_cast<long long>(encoder.hidden),
                trainer.devices().size(), result.accuracy);
    return 0;
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "supersenses: %s\n", e.what());
    return e.kind() == ls::ErrorKind::kUsage ? 2 : 1;
  }
}
