// Pipeline::evaluate on host devices: the counts equal one device's DataParallel::evaluate for a
// GPT language model with padded sequences (2 and 4 stages, and 2 pipelines of 2 stages) and
// for an MLP, over data sets longer than the evaluation window and not a multiple of the chunk.
#include <gtest/gtest.h>

#include <random>

#include <lockstep/error.h>
#include <lockstep/transformer_config.h>
#include <lockstep/pipeline.h>
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
OptimizerFactory sgd() { return testing::momentum_sgd(); }
ModelFactory tiny_gpt() { return transformer_factory(testing::tiny_gpt_config()); }

// 37 sequences of random lengths, right-padded with 0; next-token labels, padding ignored.
data::Dataset token_set() {
  std::mt19937 rng(5);
  data::Dataset d;
  d.name = "random sequences";
  d.count = 37;
  d.features = 8;
  d.label_width = 8;
  d.classes = 20;
  for (int64_t r = 0; r < d.count; ++r) {
    const int64_t length = 2 + static_cast<int64_t>(rng() % 7);
    for (int64_t t = 0; t < 8; ++t) d.tokens.push_back(t < length ? 1 + rng() % 19 : 0);
    for (int64_t t = 0; t < 8; ++t) {
      d.labels.push_back(t + 1 < length ? d.tokens[static_cast<size_t>(r * 8 + t + 1)]
                                        : data::kIgnoreLabel);
    }
  }
  return d;
}

data::Dataset image_set() {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  data::Dataset d;
  d.name = "random images";
  d.count = 53;
  d.features = 20;
  d.classes = 10;
  for (int64_t i = 0; i < d.count * d.features; ++i) d.images.push_back(normal(rng));
  for (int64_t i = 0; i < d.count; ++i) d.labels.push_back(static_cast<int32_t>(rng() % 10));
  return d;
}

void expect_same_counts(const EvalResult& want, const EvalResult& got, const std::string& what) {
  EXPECT_EQ(got.examples, want.examples) << what;
  EXPECT_DOUBLE_EQ(got.accuracy, want.accuracy) << what;
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss) << what;
}

TEST(PipelineEvaluate, GptCountsEqualOneDevice) {
  const data::Dataset set = token_set();
  DataParallel one(hosts(1), tiny_gpt(), sgd());
  const EvalResult want = one.evaluate(set, 4);  // 10 chunks: past the evaluation window
  for (auto [devices, stages] : {std::pair{2, 2}, std::pair{4, 4}, std::pair{4, 2}}) {
    PipelineOptions o;
    o.stages = stages;
    Pipeline pipe(hosts(devices), tiny_gpt(), sgd(), o);
    expect_same_counts(want, pipe.evaluate(set, 4),
                       std::to_string(devices) + " devices, " + std::to_string(stages) + " stages");
  }
}

TEST(PipelineEvaluate, MlpCountsEqualOneDeviceAfterTraining) {
  const data::Dataset set = image_set();
  const ModelFactory mlp = mlp_factory({20, 32, 24, 10});
  data::Batch batch;
  batch.size = 16;
  batch.features = 20;
  batch.images.assign(set.images.begin(), set.images.begin() + 16 * 20);
  batch.labels.assign(set.labels.begin(), set.labels.begin() + 16);
  DataParallel one(hosts(1), mlp, sgd());
  PipelineOptions o;
  o.stages = 3;
  o.micro_batches = 1;  // one micro-batch: the same sums as one device
  Pipeline pipe(hosts(3), mlp, sgd(), o);
  for (int s = 0; s < 3; ++s) {
    one.step(batch);
    pipe.step(batch);
  }
  expect_same_counts(one.evaluate(set, 5), pipe.evaluate(set, 5), "mlp on 3 stages");
  EXPECT_THROW(pipe.evaluate(set, 0), Error);
}

}  // namespace
}  // namespace ls
