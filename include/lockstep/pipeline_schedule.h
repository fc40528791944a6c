// Pipeline schedules as a pure function: (stages, micro-batches, kind) -> for every stage, the
// ordered list of actions it runs in one step (forward or backward of one micro-batch).
//
// GPipe: every forward, then every backward (in reverse), so a stage holds the activations of
// all m micro-batches. 1F1B (PipeDream-flush, Megatron-LM's default): stage s runs p - s - 1
// warm-up forwards, then alternates one forward and one backward, then drains the remaining
// backwards; it holds at most p - s micro-batches in flight, with the same bubble as GPipe.
// Both are deadlock-free when sends never block (parallel/pipeline/stage_inbox.h): a stage only
// waits for what an earlier action of a neighbour produces. Theory bubble: (p - 1) / (m + p - 1).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ls {

enum class ScheduleKind { k1F1B, kGPipe };
const char* schedule_name(ScheduleKind kind);  // "1f1b", "gpipe"
// "1f1b" or "gpipe"; anything else is an ls::Error naming it and the choices.
ScheduleKind parse_schedule(const std::string& name);

struct PipelineAction {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};

// actions[s] is stage s's order. stages >= 1 and micro_batches >= 1, else an ls::Error.
std::vector<std::vector<PipelineAction>> pipeline_schedule(int stages, int micro_batches,
                                                           ScheduleKind kind);

// Splits L consecutive layers into `stages` consecutive ranges [first, end), near-equal by the
// number of layers that hold parameters (a layer without any, such as ReLU, goes with the one
// before it; leading ones with the first): stages get floor or ceil of (such layers / stages),
// the later stages the extra ones. An ls::Error when there are fewer such layers than stages.
std::vector<std::pair<int, int>> split_layers(const std::vector<bool>& has_parameters, int stages);

// The idle fraction of an ideal pipeline with equal stages and free transfers: (p-1)/(m+p-1).
double theoretical_bubble(int stages, int micro_batches);

}  // namespace ls
