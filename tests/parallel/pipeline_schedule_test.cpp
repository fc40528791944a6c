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
  // Run on the ideal pipeline, 1F1B and GPipe have the textbook bubble for every size.
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 7, 16}) {
      const double textbook = static_cast<double>(p - 1) / (m + p - 1);
      EXPECT_DOUBLE_EQ(theoretical_bubble(p, m, ScheduleKind::k1F1B), textbook) << p << " " << m;
      EXPECT_DOUBLE_EQ(theoretical_bubble(p, m, ScheduleKind::kGPipe), textbook) << p << " " << m;
    }
  }
}

// ---- ZB-H1 -------------------------------------------------------------------------------------

// Every stage runs each micro-batch's forward, backward (B) and weight gradient (W) once, in
// that order; B's and W's in micro-batch order (so weight gradients sum as under 1F1B). Returns
// per stage the most micro-batches holding whole activations (forwarded, B not run) and the most
// holding anything (W not run).
std::vector<std::pair<int, int>> check_zero_bubble(int p, int m) {
  const auto schedule = pipeline_schedule(p, m, ScheduleKind::kZBH1);
  EXPECT_EQ(schedule.size(), static_cast<size_t>(p));
  std::vector<std::pair<int, int>> peaks;
  for (const auto& actions : schedule) {
    EXPECT_EQ(actions.size(), static_cast<size_t>(3 * m));
    int forwards = 0, backwards = 0, weights = 0, whole = 0, held = 0;
    for (const PipelineAction& a : actions) {
      switch (a.kind) {
        case Kind::kForward: EXPECT_EQ(a.micro_batch, forwards++); break;
        case Kind::kBackward:
          EXPECT_EQ(a.micro_batch, backwards++);
          EXPECT_LT(a.micro_batch, forwards) << "B before its forward";
          break;
        case Kind::kWeight:
          EXPECT_EQ(a.micro_batch, weights++);
          EXPECT_LT(a.micro_batch, backwards) << "W before its B";
          break;
      }
      whole = std::max(whole, forwards - backwards);
      held = std::max(held, forwards - weights);
    }
    EXPECT_EQ(forwards, m);
    EXPECT_EQ(backwards, m);
    EXPECT_EQ(weights, m);
    peaks.emplace_back(whole, held);
  }
  return peaks;
}

TEST(PipelineSchedule, ZeroBubbleRunsEveryActionOnceInOrderWithOneFOneBsActivations) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 7, 16}) {
      const auto peaks = check_zero_bubble(p, m);
      for (int s = 0; s < p; ++s) {
        // As 1F1B: p - s micro-batches with whole activations; W lags B by at most s more.
        EXPECT_EQ(peaks[static_cast<size_t>(s)].first, std::min(p - s, m)) << p << " " << m;
        EXPECT_LE(peaks[static_cast<size_t>(s)].second, std::min(p, m)) << p << " " << m;
      }
    }
  }
}

TEST(PipelineSchedule, ZeroBubbleOrderOnFourStages) {
  const auto schedule = pipeline_schedule(4, 8, ScheduleKind::kZBH1);
  auto order = [](const std::vector<PipelineAction>& actions) {
    std::string out;
    for (const PipelineAction& a : actions) {
      out += a.kind == Kind::kForward ? 'F' : a.kind == Kind::kBackward ? 'B' : 'W';
      out += std::to_string(a.micro_batch);
      out += ' ';
    }
    return out;
  };
  EXPECT_EQ(order(schedule[0]),
            "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7 ");
  EXPECT_EQ(order(schedule[3]),
            "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 ");
}

// The paper's figures (Qi et al. 2023, equal F, B and W): at 2 stages and 8 micro-batches 1F1B's
// 11.1% becomes 4.0%, at 4 stages 27.3% becomes 11.1%; (p-1)/(3m+p-1) whenever m >= p.
TEST(PipelineSchedule, ZeroBubbleReachesThePapersBubble) {
  EXPECT_NEAR(theoretical_bubble(2, 8, ScheduleKind::k1F1B), 0.111, 5e-4);
  EXPECT_NEAR(theoretical_bubble(2, 8, ScheduleKind::kZBH1), 0.040, 5e-4);
  EXPECT_NEAR(theoretical_bubble(4, 8, ScheduleKind::k1F1B), 0.273, 5e-4);
  EXPECT_NEAR(theoretical_bubble(4, 8, ScheduleKind::kZBH1), 0.111, 5e-4);
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 7, 8, 16}) {
      const double zero_bubble = theoretical_bubble(p, m, ScheduleKind::kZBH1);
      if (m >= p) {
        EXPECT_DOUBLE_EQ(zero_bubble, static_cast<double>(p - 1) / (3 * m + p - 1)) << p << " " << m;
      }
      // Never worse than 1F1B, and better wherever 1F1B has a bubble.
      const double one_f_one_b = theoretical_bubble(p, m, ScheduleKind::k1F1B);
      EXPECT_LE(zero_bubble, one_f_one_b) << p << " " << m;
      if (p > 1) {
        EXPECT_LT(zero_bubble, one_f_one_b) << p << " " << m;
      }
    }
  }
}

TEST(PipelineSchedule, BadSizesAndNamesAreErrors) {
  EXPECT_THROW(pipeline_schedule(0, 4, ScheduleKind::k1F1B), Error);
  EXPECT_THROW(pipeline_schedule(2, 0, ScheduleKind::kGPipe), Error);
  EXPECT_EQ(parse_schedule("gpipe"), ScheduleKind::kGPipe);
  EXPECT_EQ(parse_schedule("1f1b"), ScheduleKind::k1F1B);
  EXPECT_EQ(parse_schedule("zb-h1"), ScheduleKind::kZBH1);
  EXPECT_THROW(pipeline_schedule(2, 0, ScheduleKind::kZBH1), Error);
  try {
    parse_schedule("zigzag");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'zigzag'; use 1f1b, gpipe or zb-h1"), std::string::npos);
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
