// Pipeline schedules (see lockstep/pipeline_schedule.h).
#include <lockstep/pipeline_schedule.h>

#include <algorithm>
#include <map>
#include <tuple>

#include <lockstep/error.h>

namespace ls {

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::kZBH1: return "zb-h1";
  }
  return "?";
}

ScheduleKind parse_schedule(const std::string& name) {
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kZBH1}) {
    if (name == schedule_name(kind)) return kind;
  }
  LS_THROW("unknown pipeline schedule '", name, "'; use 1f1b, gpipe or zb-h1");
}

bool splits_backward(ScheduleKind kind) { return kind == ScheduleKind::kZBH1; }

const char* action_name(PipelineAction::Kind kind) {
  switch (kind) {
    case PipelineAction::Kind::kForward: return "forward";
    case PipelineAction::Kind::kBackward: return "backward";
    case PipelineAction::Kind::kWeight: return "weight gradient";
  }
  return "?";
}

namespace {

using Kind = PipelineAction::Kind;

// Stage s of ZB-H1 (see the header): 1F1B's forwards and B's, with W lagging B by s micro-batches
// (Note [ZB-H1's order]).
std::vector<PipelineAction> zero_bubble_h1(int stages, int micro_batches, int s) {
  std::vector<PipelineAction> actions;
  int forward = 0, backward = 0, weight = 0;
  auto f = [&] { actions.push_back({Kind::kForward, forward++}); };
  auto b = [&] { actions.push_back({Kind::kBackward, backward++}); };
  auto w = [&] { actions.push_back({Kind::kWeight, weight++}); };
  // Note [ZB-H1's order]
  // Warm-up: p - s forwards, one more than 1F1B's, as the stage's first B then runs s actions
  // ahead of its W. Then s rounds of (B, F) with the W's held back: those are the slots where
  // 1F1B's stage s would wait for the later stages' backward, and a held-back W fills each in the
  // cool-down instead. Steady state B W F, cool-down B W, then the s held-back W's. Run with
  // equal F, B and W times this is the paper's ZB-H1, bubble (p-1)/(3m+p-1) for m >= p
  // (theoretical_bubble computes it; pipeline_schedule_test checks it).
  while (forward < std::min(stages - s, micro_batches)) f();
  for (int k = 0; k < s; ++k) {
    if (backward < forward) b();
    if (forward < micro_batches) f();
  }
  while (forward < micro_batches) {
    b();
    w();
    f();
  }
  while (backward < micro_batches) {
    b();
    w();
  }
  while (weight < micro_batches) w();
  return actions;
}

}  // namespace

std::vector<std::vector<PipelineAction>> pipeline_schedule(int stages, int micro_batches,
                                                           ScheduleKind kind) {
  LS_CHECK(stages >= 1, "a pipeline needs at least 1 stage, got ", stages);
  LS_CHECK(micro_batches >= 1, "a pipeline step needs at least 1 micro-batch, got ", micro_batches);
  std::vector<std::vector<PipelineAction>> out(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineAction>& actions = out[static_cast<size_t>(s)];
    if (kind == ScheduleKind::kZBH1) {
      actions = zero_bubble_h1(stages, micro_batches, s);
      continue;
    }
    if (kind == ScheduleKind::kGPipe) {
      for (int i = 0; i < micro_batches; ++i) actions.push_back({Kind::kForward, i});
      for (int i = micro_batches - 1; i >= 0; --i) actions.push_back({Kind::kBackward, i});
      continue;
    }
    const int warmup = std::min(stages - s - 1, micro_batches);
    int forward = 0, backward = 0;
    while (forward < warmup) actions.push_back({Kind::kForward, forward++});
    while (forward < micro_batches) {  // steady state: one forward, one backward
      actions.push_back({Kind::kForward, forward++});
      actions.push_back({Kind::kBackward, backward++});
    }
    while (backward < micro_batches) actions.push_back({Kind::kBackward, backward++});
  }
  return out;
}

std::vector<std::pair<int, int>> split_layers(const std::vector<bool>& has_parameters, int stages) {
  std::vector<int> units;  // the layers that hold parameters: each starts a unit
  for (size_t i = 0; i < has_parameters.size(); ++i) {
    if (has_parameters[i]) units.push_back(static_cast<int>(i));
  }
  const int n = static_cast<int>(units.size());
  LS_CHECK(stages >= 1, "a pipeline needs at least 1 stage, got ", stages);
  LS_CHECK(stages <= n, "a pipeline of ", stages, " stages needs at least ", stages,
           " layers with parameters, but the model has ", n, " (of ", has_parameters.size(),
           " layers); use at most ", n, " stages or a deeper model");
  std::vector<std::pair<int, int>> out;
  for (int s = 0; s < stages; ++s) {
    const int first_unit = n * s / stages, end_unit = n * (s + 1) / stages;
    const int first = s == 0 ? 0 : units[static_cast<size_t>(first_unit)];
    const int end = s + 1 == stages ? static_cast<int>(has_parameters.size())
                                    : units[static_cast<size_t>(end_unit)];
    out.emplace_back(first, end);
  }
  return out;
}

double theoretical_bubble(int stages, int micro_batches, ScheduleKind kind) {
  LS_CHECK(stages >= 1 && micro_batches >= 1, "theoretical_bubble: stages ", stages,
           " and micro-batches ", micro_batches, " must be at least 1");
  // Each stage runs its actions in order, each as soon as its input exists: a forward needs the
  // previous stage's forward, a backward the next stage's backward (its own forward on the last
  // stage), a weight gradient its own backward, which precede it on the stage. Times in units
  // of a forward: a whole backward takes 2, split B and W 1 each.
  const auto schedule = pipeline_schedule(stages, micro_batches, kind);
  const int backward_time = splits_backward(kind) ? 1 : 2;
  std::map<std::tuple<int, Kind, int>, int64_t> finished;  // (stage, kind, micro-batch) -> time
  std::vector<size_t> next(static_cast<size_t>(stages), 0);
  std::vector<int64_t> free_at(static_cast<size_t>(stages), 0);
  int64_t busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      const auto& actions = schedule[static_cast<size_t>(s)];
      for (size_t& k = next[static_cast<size_t>(s)]; k < actions.size(); ++k) {
        const PipelineAction a = actions[k];
        int64_t ready = 0;
        if (a.kind != Kind::kWeight) {
          const bool forward = a.kind == Kind::kForward;
          const int from = forward ? s - 1 : s + 1;
          const bool has_input = forward ? from >= 0 : from < stages;
          if (has_input) {
            const auto input = finished.find({from, a.kind, a.micro_batch});
            if (input == finished.end()) break;  // not produced yet: run the other stages
            ready = input->second;
          }
        }
        const int64_t duration = a.kind == Kind::kBackward ? backward_time : 1;
        int64_t& now = free_at[static_cast<size_t>(s)];
        now = std::max(now, ready) + duration;
        finished[{s, a.kind, a.micro_batch}] = now;
        busy += duration;
        progress = true;
      }
    }
  }
  const int64_t span = *std::max_element(free_at.begin(), free_at.end());
  for (int s = 0; s < stages; ++s) {
    LS_ASSERT(next[static_cast<size_t>(s)] == schedule[static_cast<size_t>(s)].size(),
              "schedule ", schedule_name(kind), " deadlocks on stage ", s);
  }
  const int64_t capacity = span * stages;
  return static_cast<double>(capacity - busy) / static_cast<double>(capacity);
}

}  // namespace ls
