// The skip limit (TrainingOptions::max_consecutive_skips) holds for every strategy, with one
// message: a learning rate of 1e20 makes every step after the first non-finite, and the run ends
// with kind non_finite once the limit is reached in a row.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include <lockstep/data_parallel.h>
#include <lockstep/pipeline.h>
#include "training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::lm_batch;
using testing::tiny_gpt_config;

constexpr int kLimit = 3;

template <typename Options>
Options limited() {
  Options options;
  options.max_consecutive_skips = kLimit;
  return options;
}

// The error that ends the run; "" when it never ends within 20 steps.
std::string run_until_stopped(Trainer& trainer) {
  for (int s = 0; s < 20; ++s) {
    try {
      trainer.step(lm_batch(8, 40 + static_cast<uint32_t>(s)));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kNonFinite) << e.what();
      return e.message();
    }
  }
  return "";
}

TEST(SkipLimit, EveryStrategyStopsWithTheSameMessage) {
  const OptimizerFactory huge_lr = make_optimizer_factory({"sgd", 1e20f});
  DataParallel dp(hosts(2), transformer_factory(tiny_gpt_config()), huge_lr,
                  limited<DataParallelOptions>());
  PipelineOptions pipeline_options = limited<PipelineOptions>();
  pipeline_options.stages = 2;
  Pipeline pipeline(hosts(2), transformer_factory(tiny_gpt_config()), huge_lr, pipeline_options);
  const std::string from_dp = run_until_stopped(dp), from_pipeline = run_until_stopped(pipeline);
  ASSERT_FALSE(from_dp.empty()) << "data parallelism never stopped";
  ASSERT_FALSE(from_pipeline.empty()) << "the pipeline never stopped";
  // Both stopped at the same step; only the count of non-finite values may differ (a pipeline
  // counts a tied parameter's gradient on each stage holding it).
  const std::string stopped = "3 steps in a row (up to step ";
  ASSERT_NE(from_dp.find(stopped), std::string::npos) << from_dp;
  EXPECT_EQ(from_dp.substr(0, from_dp.find(',')), from_pipeline.substr(0, from_pipeline.find(',')));
  for (const std::string& message : {from_dp, from_pipeline}) {
    EXPECT_NE(message.find("non-finite gradient values); lower the learning rate or check the "
                           "data"),
              std::string::npos)
        << message;
  }
}

TEST(SkipLimit, ALimitBelowOneIsRefused) {
  PipelineOptions options;
  options.max_consecutive_skips = 0;
  try {
    Pipeline pipeline(hosts(2), transformer_factory(tiny_gpt_config()), make_optimizer_factory({}),
                      options);
    FAIL() << "a skip limit of 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("max_consecutive_skips is 0; it must be at least 1"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ls
