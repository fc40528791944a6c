// Losses other than cross-entropy, through DataParallel: squared error and BCE with logits on value
// targets train on 1, 2 and 4 host devices (and ZeRO-2 with accumulation) as on one device; a
// user-written loss built from the public ops does too; a loss that breaks the contract of
// lockstep/nn/loss.h (a mean instead of a sum) is caught at the first step, and shown to be
// wrong when the check is off; bad combinations of loss and targets say what to fix.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/lockstep.h>

namespace {

using ls::Tape;
using ls::Tensor;
using ls::Var;

// 4 features -> 2 values in [0, 1]: a smooth one and a step, learnable by a small MLP.
ls::data::Batch value_batch(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  ls::data::Batch batch;
  batch.size = rows;
  batch.features = 4;
  batch.label_width = 2;
  for (int64_t i = 0; i < rows; ++i) {
    float x[4];
    for (float& v : x) v = normal(rng);
    batch.images.insert(batch.images.end(), x, x + 4);
    batch.targets.push_back(1.0f / (1.0f + std::exp(-(x[0] + x[1]))));
    batch.targets.push_back(x[2] > 0.0f ? 1.0f : 0.0f);
  }
  return batch;
}

// A user-written loss from the public ops: half the squared error (a sum: the contract holds).
class HalfSquaredError final : public ls::nn::Loss {
 public:
  std::string name() const override { return "half_squared_error"; }
  ls::nn::TargetKind targets() const override { return ls::nn::TargetKind::kValues; }
  Var sum(Tape& tape, const Var& output, const Tensor& targets) const override {
    return ls::nn::scale(tape, ls::nn::squared_error_sum(tape, output, targets), 0.5f);
  }
};

// Breaks the contract: the MEAN over its rows, so the engine's division by the global count
// divides twice, by a different amount on every replica count.
class MeanSquaredErrorOfRows final : public ls::nn::Loss {
 public:
  std::string name() const override { return "mean_of_rows"; }
  ls::nn::TargetKind targets() const override { return ls::nn::TargetKind::kValues; }
  Var sum(Tape& tape, const Var& output, const Tensor& targets) const override {
    const auto rows = static_cast<float>(output->value.dim(0));
    return ls::nn::scale(tape, ls::nn::squared_error_sum(tape, output, targets), 1.0f / rows);
  }
};

// Returns the model's output itself, one value per element: not a sum.
class NotReduced final : public ls::nn::Loss {
 public:
  std::string name() const override { return "not_reduced"; }
  ls::nn::TargetKind targets() const override { return ls::nn::TargetKind::kValues; }
  Var sum(Tape&, const Var& output, const Tensor&) const override { return output; }
};

ls::DataParallelOptions with_loss(std::shared_ptr<const ls::nn::Loss> loss) {
  ls::DataParallelOptions options;
  options.loss = std::move(loss);
  return options;
}

std::vector<float> losses(const std::string& devices, const ls::DataParallelOptions& options,
                          int steps = 20) {
  ls::DataParallel trainer(ls::parse_devices(devices), ls::mlp_factory({4, 16, 2}),
                           ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.0f}), options);
  const ls::data::Batch batch = value_batch(16, 3);
  std::vector<float> out;
  for (int s = 0; s < steps; ++s) out.push_back(trainer.step(batch).loss);
  return out;
}

double worst_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t s = 0; s < a.size(); ++s) {
    worst = std::max(worst, std::abs(static_cast<double>(a[s]) - b[s]) / std::abs(a[s]));
  }
  return worst;
}

void expect_trains_as_one_device(const ls::DataParallelOptions& options) {
  const std::vector<float> one = losses("host:1", options);
  EXPECT_LT(one.back(), 0.8f * one.front()) << "it did not learn";
  EXPECT_LE(worst_relative_difference(one, losses("host:2", options)), 1e-5);
  EXPECT_LE(worst_relative_difference(one, losses("host:4", options)), 1e-5);
  ls::DataParallelOptions zero2 = options;
  zero2.shard = ls::ShardMode::kGradients;
  zero2.accumulate = 2;
  EXPECT_LE(worst_relative_difference(one, losses("host:4", zero2)), 1e-5);
}

TEST(Losses, MseTrainsOnSeveralDevicesAsOnOne) {
  expect_trains_as_one_device(with_loss(ls::nn::mse_loss()));
}

TEST(Losses, BceWithLogitsTrainsOnSeveralDevicesAsOnOne) {
  expect_trains_as_one_device(with_loss(ls::nn::bce_with_logits_loss()));
}

TEST(Losses, AUserWrittenLossTrainsAsOnOneDeviceAndIsHalfTheSquaredError) {
  const auto half = with_loss(std::make_shared<HalfSquaredError>());
  expect_trains_as_one_device(half);
  // Same initial parameters (same seed): the first step's loss is half mse's.
  const float half_first = losses("host:1", half, 1)[0];
  const float mse_first = losses("host:1", with_loss(ls::nn::mse_loss()), 1)[0];
  EXPECT_NEAR(half_first, 0.5f * mse_first, 1e-6f * mse_first);
}

TEST(Losses, AMeanInsteadOfASumIsCaughtAtTheFirstStep) {
  const auto mean = with_loss(std::make_shared<MeanSquaredErrorOfRows>());
  try {
    losses("host:2", mean, 1);
    FAIL() << "a loss that averages over its rows was accepted";
  } catch (const ls::Error& e) {
    EXPECT_EQ(e.kind(), ls::ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("'mean_of_rows' breaks the loss contract"),
              std::string::npos)
        << e.what();
  }
  // What the check prevents: unchecked, 2 devices train differently from one.
  ls::DataParallelOptions unchecked = mean;
  unchecked.check_loss_contract = false;
  EXPECT_GT(worst_relative_difference(losses("host:1", unchecked), losses("host:2", unchecked)),
            1e-3);
}

TEST(Losses, ALossReturnsOneElement) {
  try {
    losses("host:1", with_loss(std::make_shared<NotReduced>()), 1);
    FAIL() << "a loss returning a tensor per element was accepted";
  } catch (const ls::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a loss returns the sum of its terms, one element"),
              std::string::npos)
        << e.what();
  }
}

TEST(Losses, TargetsOfTheWrongKindSayWhatToFill) {
  auto error_of = [](const ls::DataParallelOptions& options, const ls::data::Batch& batch) {
    try {
      ls::DataParallel trainer(ls::parse_devices("host:1"), ls::mlp_factory({4, 8, 2}),
                               ls::make_optimizer_factory({}), options);
      trainer.step(batch);
    } catch (const ls::Error& e) {
      EXPECT_EQ(e.kind(), ls::ErrorKind::kUsage);
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  const ls::data::Batch values = value_batch(4, 1);
  ls::data::Batch labels = values;
  labels.targets.clear();
  labels.label_width = 1;
  labels.labels = {0, 1, 1, 0};
  EXPECT_NE(error_of(with_loss(ls::nn::mse_loss()), labels).find("fill batch.targets"),
            std::string::npos);
  EXPECT_NE(error_of({}, values).find("fill batch.labels, or choose a loss on values"),
            std::string::npos);
  ls::data::Batch both = values;
  both.labels = {0, 1, 1, 0, 0, 1, 1, 0};
  EXPECT_NE(error_of(with_loss(ls::nn::mse_loss()), both).find("exactly one of labels"),
            std::string::npos);
}

}  // namespace

namespace {

std::vector<float> pipeline_losses(std::shared_ptr<const ls::nn::Loss> loss, int steps = 20) {
  ls::PipelineOptions options;
  options.stages = 2;
  options.micro_batches = 4;
  options.loss = std::move(loss);
  ls::Pipeline trainer(ls::parse_devices("host:2"), ls::mlp_factory({4, 16, 2}),
                       ls::make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.0f}), options);
  const ls::data::Batch batch = value_batch(16, 3);
  std::vector<float> out;
  for (int s = 0; s < steps; ++s) out.push_back(trainer.step(batch).loss);
  return out;
}

// A 2-stage pipeline of 4 micro-batches trains a value loss, built in or the user's, as one
// device does (the sum over micro-batches rounds differently: within 1e-5).
TEST(Losses, APipelineTrainsValueLossesAsOneDevice) {
  EXPECT_LE(worst_relative_difference(losses("host:1", with_loss(ls::nn::mse_loss())),
                                      pipeline_losses(ls::nn::mse_loss())),
            1e-5);
  const auto half = std::make_shared<HalfSquaredError>();
  EXPECT_LE(worst_relative_difference(losses("host:1", with_loss(half)), pipeline_losses(half)),
            1e-5);
}

// A pipeline's last stage checks a custom loss's contract as DataParallel does, with the same
// message; unchecked, the mean trains as it cannot on one device.
TEST(Losses, APipelineCatchesAMeanInsteadOfASumAtTheFirstStep) {
  try {
    pipeline_losses(std::make_shared<MeanSquaredErrorOfRows>(), 1);
    FAIL() << "a pipeline accepted a loss that averages over its rows";
  } catch (const ls::Error& e) {
    EXPECT_EQ(e.kind(), ls::ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("'mean_of_rows' breaks the loss contract"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(pipeline_losses(std::make_shared<HalfSquaredError>(), 1).size(), 1u)
      << "a sum passes the check";
}

}  // namespace
