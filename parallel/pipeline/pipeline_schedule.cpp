// Pipeline schedules (see lockstep/pipeline_schedule.h).
#include <lockstep/pipeline_schedule.h>

#include <algorithm>

#include <lockstep/error.h>

namespace ls {

const char* schedule_name(ScheduleKind kind) {
  return kind == ScheduleKind::kGPipe ? "gpipe" : "1f1b";
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "gpipe") return ScheduleKind::kGPipe;
  LS_THROW("unknown pipeline schedule '", name, "'; use 1f1b or gpipe");
}

std::vector<std::vector<PipelineAction>> pipeline_schedule(int stages, int micro_batches,
                                                           ScheduleKind kind) {
  LS_CHECK(stages >= 1, "a pipeline needs at least 1 stage, got ", stages);
  LS_CHECK(micro_batches >= 1, "a pipeline step needs at least 1 micro-batch, got ", micro_batches);
  using Kind = PipelineAction::Kind;
  std::vector<std::vector<PipelineAction>> out(static_cast<size_t>(stages));
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineAction>& actions = out[static_cast<size_t>(s)];
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

double theoretical_bubble(int stages, int micro_batches) {
  LS_CHECK(stages >= 1 && micro_batches >= 1, "theoretical_bubble: stages ", stages,
           " and micro-batches ", micro_batches, " must be at least 1");
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace ls
