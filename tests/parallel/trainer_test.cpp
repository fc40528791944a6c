// Trainer (lockstep/trainer.h): one loop drives data parallel and a pipeline alike, through
// step_async()/result(), with the same results as one device; a pipeline's step_async() keeps
// each result until it is taken, once; the layout line says how the model is spread.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/data_parallel.h>
#include <lockstep/pipeline.h>
#include <lockstep/trainer.h>
#include "random_batch.h"
#include "training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::max_relative_difference;
using testing::momentum_sgd;
using testing::random_batch;

const ModelFactory kMlp = mlp_factory({20, 32, 24, 16, 10});

struct TrainRun {
  std::vector<float> losses;
  std::vector<NamedParameter> parameters;
};

// What a program does: queue each step, take the previous step's result after it.
TrainRun train(Trainer& trainer, int steps) {
  TrainRun run;
  int64_t pending = 0;
  for (int s = 0; s < steps; ++s) {
    const int64_t queued = trainer.step_async(random_batch(16, 20, 300 + static_cast<uint32_t>(s)));
    if (pending > 0) run.losses.push_back(trainer.result(pending).loss);
    pending = queued;
  }
  run.losses.push_back(trainer.result(pending).loss);
  run.parameters = trainer.model_parameters();
  return run;
}

PipelineOptions two_stages() {
  PipelineOptions o;
  o.stages = 2;
  o.micro_batches = 2;
  return o;
}

TEST(Trainer, OneLoopDrivesEveryStrategyToTheSameModel) {
  constexpr int kSteps = 6;
  std::vector<std::unique_ptr<Trainer>> trainers;
  trainers.push_back(std::make_unique<DataParallel>(hosts(1), kMlp, momentum_sgd()));
  trainers.push_back(std::make_unique<DataParallel>(hosts(2), kMlp, momentum_sgd()));
  trainers.push_back(std::make_unique<Pipeline>(hosts(2), kMlp, momentum_sgd(), two_stages()));
  const TrainRun reference = train(*trainers[0], kSteps);
  for (size_t t = 1; t < trainers.size(); ++t) {
    SCOPED_TRACE(trainers[t]->layout());
    const TrainRun run = train(*trainers[t], kSteps);
    ASSERT_EQ(run.losses.size(), reference.losses.size());
    for (size_t s = 0; s < run.losses.size(); ++s)
      EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5 * std::abs(reference.losses[s]));
    EXPECT_LT(max_relative_difference(reference.parameters, run.parameters), 1e-5);
    EXPECT_EQ(trainers[t]->steps_taken(), kSteps);
    EXPECT_EQ(trainers[t]->parameter_count(), trainers[0]->parameter_count());
  }
  EXPECT_EQ(trainers[0]->layout(), "1 gradient bucket(s)");
  EXPECT_EQ(trainers[2]->layout(), "pipeline of 2 stages x 1");
  EXPECT_FALSE(trainers[2]->graphs());
}

TEST(Trainer, APipelineKeepsEachQueuedResultUntilItIsTakenOnce) {
  Pipeline pipe(hosts(2), kMlp, momentum_sgd(), two_stages());
  std::vector<int64_t> numbers;
  for (uint32_t s = 0; s < 3; ++s) numbers.push_back(pipe.step_async(random_batch(16, 20, 400 + s)));
  EXPECT_EQ(numbers, (std::vector<int64_t>{1, 2, 3}));
  // Taken in any order; the same losses a fresh pipeline's step() gives.
  const float second = pipe.result(2).loss;
  const float first = pipe.result(1).loss;
  Pipeline again(hosts(2), kMlp, momentum_sgd(), two_stages());
  EXPECT_EQ(first, again.step(random_batch(16, 20, 400)).loss);
  EXPECT_EQ(second, again.step(random_batch(16, 20, 401)).loss);
  try {
    (void)pipe.result(2);
    ADD_FAILURE() << "a result taken twice was returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("taken already"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)pipe.result(7), Error);
  EXPECT_NO_THROW((void)pipe.result(3));
}

}  // namespace
}  // namespace ls
