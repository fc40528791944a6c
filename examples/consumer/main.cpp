// A program outside the lockstep tree, built against an installed lockstep: it writes its own
// model (a Module with a residual block, from the public ops), trains it on a synthetic problem
// on one and on two host devices, and checks that it learned and that both runs agree (N devices
// train as one device with the N-times batch). Exits non-zero when something is wrong.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/lockstep.h>

namespace {

// x [rows, 8] -> logits [rows, 4]: Linear, a pre-norm residual block, Linear.
class ResidualClassifier final : public ls::nn::Module {
 public:
  ResidualClassifier()
      : in_(register_module("in", std::make_unique<ls::nn::Linear>(8, 32))),
        block_(register_module("block", std::make_unique<ls::nn::Linear>(32, 32))),
        out_(register_module("out", std::make_unique<ls::nn::Linear>(32, 4))),
        norm_gamma_(register_parameter("norm_gamma", {32}, ls::Init::ones())),
        norm_beta_(register_parameter("norm_beta", {32}, ls::Init::zeros())) {}

  ls::Var forward(ls::Tape& tape, const ls::Var& x) override {
    ls::Var h = in_.forward(tape, x);
    ls::Var normed = ls::nn::layernorm(tape, h, tape.parameter(norm_gamma_),
                                       tape.parameter(norm_beta_), 1e-5f);
    h = ls::nn::add(tape, h, ls::nn::gelu(tape, block_.forward(tape, normed)));
    return out_.forward(tape, h);
  }

 private:
  ls::nn::Linear& in_;
  ls::nn::Linear& block_;
  ls::nn::Linear& out_;
  ls::Parameter& norm_gamma_;
  ls::Parameter& norm_beta_;
};

// Label = index of the largest of the first four features: learnable by a small network.
ls::data::Batch make_batch() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  ls::data::Batch batch;
  batch.size = 64;
  for (int64_t i = 0; i < batch.size; ++i) {
    int best = 0;
    for (int f = 0; f < 8; ++f) {
      batch.images.push_back(normal(rng));
      if (f < 4 && batch.images.back() > batch.images[static_cast<size_t>(i * 8 + best)]) best = f;
    }
    batch.labels.push_back(best);
  }
  return batch;
}

std::vector<float> train(const std::string& devices, const ls::data::Batch& batch) {
  ls::DataParallel trainer(ls::parse_devices(devices),
                           [] { return std::make_unique<ResidualClassifier>(); },
                           ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.0f}));
  std::vector<float> losses;
  for (int step = 0; step < 100; ++step) losses.push_back(trainer.step(batch).loss);
  return losses;
}

}  // namespace

int main() {
  try {
    const ls::data::Batch batch = make_batch();
    const std::vector<float> one = train("host:1", batch);
    const std::vector<float> two = train("host:2", batch);
    double worst = 0.0;
    for (size_t s = 0; s < 20; ++s) {
      worst = std::max(worst, std::abs(static_cast<double>(two[s]) - one[s]) / std::abs(one[s]));
    }
    std::printf("consumer: own model, loss %.4f -> %.4f on host:1; host:2 differs by %.2g "
                "(relative, first 20 steps)\n",
                one.front(), one.back(), worst);
    if (one.back() >= 0.5f * one.front()) {
      std::fprintf(stderr, "consumer: the model did not learn\n");
      return 1;
    }
    if (worst > 1e-5) {
      std::fprintf(stderr, "consumer: host:2 does not train as host:1\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
