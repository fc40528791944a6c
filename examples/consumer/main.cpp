// A program outside the lockstep tree, built against an installed lockstep (ctest
// consumer_package): it writes its own regression network (a Module with a residual block, from
// the public ops, listed as two layers for a pipeline) and its own loss (half the squared error,
// from the public ops, under the loss contract of <lockstep/nn/loss.h>), trains them on host:1,
// host:2, host:4 and as a 2-stage pipeline, and checks that it learned and that every run's losses
// agree with one device's (N devices train as one device with the N-times batch). Then the same
// for a model with two named inputs (two_input_model.h). Exits non-zero when something is wrong.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/lockstep.h>

#include "two_input_model.h"

namespace {

constexpr int64_t kFeatures = 8, kHidden = 32, kOutputs = 2;

// x [rows, 8] -> 2 values: Linear, a pre-norm residual block with GELU, Linear.
class ResidualRegressor final : public ls::nn::Module {
 public:
  ResidualRegressor()
      : in_(register_module("in", std::make_unique<ls::nn::Linear>(kFeatures, kHidden))),
        block_(register_module("block", std::make_unique<ls::nn::Linear>(kHidden, kHidden))),
        out_(register_module("out", std::make_unique<ls::nn::Linear>(kHidden, kOutputs))),
        norm_gamma_(register_parameter("norm_gamma", {kHidden}, ls::Init::ones())),
        norm_beta_(register_parameter("norm_beta", {kHidden}, ls::Init::zeros())) {}

  ls::Var forward(ls::Tape& tape, const ls::Var& x) override {
    return head(tape, body(tape, x));
  }

  // The same computation as two layers, so a pipeline can put them on two devices.
  std::vector<ls::nn::PipelineLayer> pipeline_layers() override {
    const std::vector<ls::Parameter*> all = parameters();
    std::vector<ls::Parameter*> body_parameters = {&norm_gamma_, &norm_beta_};
    for (const char* child : {"in.", "block."}) {
      for (ls::Parameter* p : ls::nn::parameters_under(all, child)) body_parameters.push_back(p);
    }
    return {{"body", body_parameters,
             [this](ls::Tape& tape, const ls::Var& x, const ls::Var&) { return body(tape, x); }},
            {"head", ls::nn::parameters_under(all, "out."),
             [this](ls::Tape& tape, const ls::Var& h, const ls::Var&) { return head(tape, h); }}};
  }

 private:
  ls::Var body(ls::Tape& tape, const ls::Var& x) {
    ls::Var h = in_.forward(tape, x);
    ls::Var normed = ls::nn::layernorm(tape, h, tape.parameter(norm_gamma_),
                                       tape.parameter(norm_beta_), 1e-5f);
    return ls::nn::add(tape, h, ls::nn::gelu(tape, block_.forward(tape, normed)));
  }
  ls::Var head(ls::Tape& tape, const ls::Var& h) { return out_.forward(tape, h); }

  ls::nn::Linear& in_;
  ls::nn::Linear& block_;
  ls::nn::Linear& out_;
  ls::Parameter& norm_gamma_;
  ls::Parameter& norm_beta_;
};

// Half the squared error: the SUM of 0.5 (output - target)^2 over the rows it gets, as the loss
// contract asks; the engine divides by the global number of targets.
class HalfSquaredError final : public ls::nn::Loss {
 public:
  std::string name() const override { return "half_squared_error"; }
  ls::nn::TargetKind targets() const override { return ls::nn::TargetKind::kValues; }
  ls::Var sum(ls::Tape& tape, const ls::Var& output, const ls::Tensor& targets) const override {
    return ls::nn::scale(tape, ls::nn::squared_error_sum(tape, output, targets), 0.5f);
  }
};

// Targets: a smooth function of the first features and a product of two others.
ls::data::Batch make_batch() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  ls::data::Batch batch;
  batch.size = 64;
  batch.features = kFeatures;
  batch.label_width = kOutputs;
  for (int64_t i = 0; i < batch.size; ++i) {
    std::vector<float> x(kFeatures);
    for (float& v : x) v = normal(rng);
    batch.images.insert(batch.images.end(), x.begin(), x.end());
    batch.targets.push_back(std::tanh(x[0] + 0.5f * x[1]));
    batch.targets.push_back(0.5f * x[2] * x[3]);
  }
  return batch;
}

std::unique_ptr<ls::Trainer> make_trainer(const std::string& devices, bool pipeline) {
  auto model = [] { return std::make_unique<ResidualRegressor>(); };
  auto optimizer = ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.0f});
  auto loss = std::make_shared<HalfSquaredError>();
  if (pipeline) {
    ls::PipelineOptions options;
    options.stages = 2;
    options.micro_batches = 4;
    options.loss = loss;
    return std::make_unique<ls::Pipeline>(ls::parse_devices(devices), model, optimizer, options);
  }
  ls::DataParallelOptions options;
  options.loss = loss;
  return std::make_unique<ls::DataParallel>(ls::parse_devices(devices), model, optimizer,
                                            options);
}

std::vector<float> train(const std::string& devices, bool pipeline, const ls::data::Batch& batch) {
  std::unique_ptr<ls::Trainer> trainer = make_trainer(devices, pipeline);
  std::vector<float> losses;
  for (int step = 0; step < 100; ++step) losses.push_back(trainer->step(batch).loss);
  return losses;
}

}  // namespace

int main() {
  try {
    const ls::data::Batch batch = make_batch();
    const std::vector<float> one = train("host:1", false, batch);
    std::printf("consumer: own model and loss, loss %.4f -> %.4f in 100 steps on host:1\n",
                one.front(), one.back());
    int failures = 0;
    if (one.back() >= 0.5f * one.front()) {
      std::fprintf(stderr, "consumer: the model did not learn\n");
      ++failures;
    }
    struct Run {
      const char* name;
      const char* devices;
      bool pipeline;
    };
    for (const Run& run : {Run{"host:2", "host:2", false}, Run{"host:4", "host:4", false},
                           Run{"a 2-stage pipeline on host:2", "host:2", true}}) {
      const std::vector<float> other = train(run.devices, run.pipeline, batch);
      double worst = 0.0;
      for (size_t s = 0; s < 20; ++s) {
        worst = std::max(worst, std::abs(static_cast<double>(other[s]) - one[s]) / one[s]);
      }
      std::printf("consumer: %s differs from host:1 by %.2g (relative, first 20 steps)\n",
                  run.name, worst);
      if (worst > 1e-5) {
        std::fprintf(stderr, "consumer: %s does not train as host:1\n", run.name);
        ++failures;
      }
    }
    failures += check_two_input_model();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
