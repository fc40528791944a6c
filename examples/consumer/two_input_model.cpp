// See two_input_model.h.
#include "two_input_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/lockstep.h>

namespace {

constexpr int64_t kMeasurements = 4, kStations = 6, kHidden = 16;

// y = out(gelu(in(measurements) + station_table[station])): each station shifts the hidden state.
class StationModel final : public ls::nn::Module {
 public:
  StationModel()
      : in_(register_module("in", std::make_unique<ls::nn::Linear>(kMeasurements, kHidden))),
        out_(register_module("out", std::make_unique<ls::nn::Linear>(kHidden, 1))),
        stations_(register_parameter("stations", {kStations, kHidden}, ls::Init::uniform(0.1f))) {}

  ls::Var forward(ls::Tape& tape, const ls::nn::Inputs& inputs) override {
    ls::Var h = in_.forward(tape, inputs["measurements"]);
    ls::Var shift = ls::nn::embedding(tape, tape.parameter(stations_), inputs["station"]->value);
    return out_.forward(tape, ls::nn::gelu(tape, ls::nn::add(tape, h, shift)));
  }

 private:
  ls::nn::Linear& in_;
  ls::nn::Linear& out_;
  ls::Parameter& stations_;
};

// 64 readings; the target is a smooth function of the measurements plus the station's offset.
ls::data::Batch readings() {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int32_t> station(0, kStations - 1);
  std::vector<float> measurements, targets;
  std::vector<int32_t> stations;
  for (int i = 0; i < 64; ++i) {
    float sum = 0.0f;
    for (int64_t j = 0; j < kMeasurements; ++j) {
      measurements.push_back(normal(rng));
      sum += measurements.back();
    }
    stations.push_back(station(rng));
    targets.push_back(std::tanh(0.5f * sum) + 0.3f * static_cast<float>(stations.back() - 2));
  }
  ls::data::Batch batch;
  batch.size = 64;
  batch.inputs.push_back(
      ls::data::NamedInput::f32("measurements", {kMeasurements}, measurements));
  batch.inputs.push_back(ls::data::NamedInput::i32("station", {}, stations));
  batch.targets = targets;
  return batch;
}

std::vector<float> train(const std::string& devices, const ls::data::Batch& batch) {
  ls::DataParallelOptions options;
  options.loss = ls::nn::mse_loss();
  ls::DataParallel trainer(ls::parse_devices(devices),
                           [] { return std::make_unique<StationModel>(); },
                           ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.0f}), options);
  std::vector<float> losses;
  for (int step = 0; step < 100; ++step) losses.push_back(trainer.step(batch).loss);
  return losses;
}

}  // namespace

int check_two_input_model() {
  const ls::data::Batch batch = readings();
  const std::vector<float> one = train("host:1", batch);
  std::printf("consumer: two named inputs, loss %.4f -> %.4f in 100 steps on host:1\n",
              one.front(), one.back());
  int failures = 0;
  if (one.back() >= 0.5f * one.front()) {
    std::fprintf(stderr, "consumer: the two-input model did not learn\n");
    ++failures;
  }
  for (const char* devices : {"host:2", "host:4"}) {
    const std::vector<float> other = train(devices, batch);
    double worst = 0.0;
    for (size_t s = 0; s < 20; ++s) {
      worst = std::max(worst, std::abs(static_cast<double>(other[s]) - one[s]) / one[s]);
    }
    std::printf("consumer: two named inputs on %s differ from host:1 by %.2g (relative, first "
                "20 steps)\n", devices, worst);
    if (worst > 1e-5) {
      std::fprintf(stderr, "consumer: the two-input model does not train on %s as on host:1\n",
                   devices);
      ++failures;
    }
  }
  return failures;
}
