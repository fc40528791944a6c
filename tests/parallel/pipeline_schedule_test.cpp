// Pipeline schedules and the layer split as pure functions: every stage runs each forward and
// backward once, a forward before its backward, 1F1B bounds the micro-batches in flight, GPipe
// runs all forwards first, the split is consecutive and near-equal, and bad sizes are errors.
#include <lockstep/pipeline_schedule.h>

#include <gtest/gtest.h>

#include <set>

#include <lockstep/error.h>

namespace ls {
namespace {

using Kind = PipelineAction::Kind;

// Checks the invariants every schedule keeps and returns the most micro-batches in flight
// (forwarded, not yet backwarded) on each stage.
std::vector<int> check_and_measure(int p, int m, ScheduleKind kind) {
  const auto schedule = pipeline_schedule(p, m, kind);
  EXPECT_EQ(schedule.size(), static_cast<size_t>(p));
  std::vector<int> peak;
  for (const auto& actions : schedule) {
    EXPECT_EQ(actions.size(), static_cast<size_t>(2 * m));
    std::set<int> forwarded, backwarded;
    int in_flight = 0, most = 0;
    for (const PipelineAction& a : actions) {
      if (a.kind == Kind::kForward) {
        EXPECT_TRUE(forwarded.insert(a.micro_batch).second) << "forward twice";
        most = std::max(most, ++in_flight);
      } else {
        EXPECT_TRUE(forwarded.count(a.micro_batch)) << "backward before forward";
        EXPECT_TRUE(backwarded.insert(a.micro_batch).second) << "backward twice";
        --in_flight;
      }
    }
    EXPECT_EQ(forwarded.size(), static_cast<size_t>(m));
    EXPECT_EQ(backwarded.size(), static_cast<size_t>(m));
    peak.push_back(most);
  }
  return peak;
}

TEST(PipelineSchedule, EveryStageRunsEachActionOnceForwardFirst) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 7, 16}) {
      check_and_measure(p, m, ScheduleKind::k1F1B);
      check_and_measure(p, m, ScheduleKind::kGPipe);
    }
  }
}

TEST(PipelineSchedule, OneFOneBKeepsAtMostStagesMinusSInFlight) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 4, 8, 16}) {
      const std::vector<int> peak = check_and_measure(p, m, ScheduleKind::k1F1B);
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(peak[static_cast<size_t>(s)], std::min(p - s, m)) << "p " << p << " m " << m;
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBOrderOnFourStages) {
  const auto schedule = pipeline_schedule(4, 6, ScheduleKind::k1F1B);
  const std::vector<PipelineAction> stage1{
      {Kind::kForward, 0}, {Kind::kForward, 1},  {Kind::kForward, 2},  {Kind::kBackward, 0},
      {Kind::kForward, 3}, {Kind::kBackward, 1}, {Kind::kForward, 4},  {Kind::kBackward, 2},
      {Kind::kForward, 5}, {Kind::kBackward, 3}, {Kind::kBackward, 4}, {Kind::kBackward, 5}};
  EXPECT_EQ(schedule[1], stage1);
  const std::vector<PipelineAction> last_two{schedule[3][0], schedule[3][1]};
  EXPECT_EQ(last_two, (std::vector<PipelineAction>{{Kind::kForward, 0}, {Kind::kBackward, 0}}));
}

TEST(PipelineSchedule, GPipeRunsAllForwardsThenAllBackwards) {
  for (const auto& actions : pipeline_schedule(3, 5, ScheduleKind::kGPipe)) {
    for (int k = 0; k < 5; ++k) EXPECT_EQ(actions[static_cast<size_t>(k)].kind, Kind::kForward);
    for (int k = 5; k < 10; ++k) EXPECT_EQ(actions[static_cast<size_t>(k)].kind, Kind::kBackward);
  }
  EXPECT_EQ(check_and_measure(4, 8, ScheduleKind::kGPipe), (std::vector<int>{8, 8, 8, 8}));
}

TEST(PipelineSchedule, TheoreticalBubble) {
  EXPECT_DOUBLE_EQ(theoretical_bubble(1, 4), 0.0);
  EXPECT_DOUBLE_EQ(theoretical_bubble(2, 1), 0.5);
  EXPECT_DOUBLE_EQ(theoretical_bubble(4, 8), 3.0 / 11.0);
}

TEST(PipelineSchedule, BadSizesAndNamesAreErrors) {
  EXPECT_THROW(pipeline_schedule(0, 4, ScheduleKind::k1F1B), Error);
  EXPECT_THROW(pipeline_schedule(2, 0, ScheduleKind::kGPipe), Error);
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::k1F1B);
  try {
    parse_schedule("zigzag");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zigzag'; use 1f1b or gpipe"), std::string::npos);
  }
}

TEST(PipelineSplit, ParameterlessLayersGoWithTheLayerBefore) {
  // An MLP: Linear ReLU Linear ReLU Linear.
  const std::vector<bool> mlp{true, false, true, false, true};
  EXPECT_EQ(split_layers(mlp, 1), (std::vector<std::pair<int, int>>{{0, 5}}));
  EXPECT_EQ(split_layers(mlp, 2), (std::vector<std::pair<int, int>>{{0, 2}, {2, 5}}));
  EXPECT_EQ(split_layers(mlp, 3), (std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 5}}));
  // Leading parameterless layers go with the first stage.
  EXPECT_EQ(split_layers({false, true, true}, 2),
            (std::vector<std::pair<int, int>>{{0, 2}, {2, 3}}));
  // Near-equal: 6 layers on 4 stages get 1, 2, 1, 2.
  EXPECT_EQ(split_layers(std::vector<bool>(6, true), 4),
            (std::vector<std::pair<int, int>>{{0, 1}, {1, 3}, {3, 4}, {4, 6}}));
}

TEST(PipelineSplit, MoreStagesThanLayersIsAnErrorNamingBoth) {
  try {
    split_layers({true, false, true, false, true}, 4);
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4 stages"), std::string::npos) << what;
    EXPECT_NE(what.find("the model has 3"), std::string::npos) << what;
    EXPECT_NE(what.find("use at most 3 stages"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace ls
