// Pipeline schedules as a pure function: (stages, micro-batches, kind) -> for every stage, the
// ordered list of actions it runs in one step (forward, backward or weight gradient of one
// micro-batch).
//
// GPipe: every forward, then every backward (in reverse), so a stage holds the activations of
// all m micro-batches. 1F1B (PipeDream-flush, Megatron-LM's default): stage s runs p - s - 1
// warm-up forwards, then alternates one forward and one backward, then drains the remaining
// backwards; it holds at most p - s micro-batches in flight, with the same bubble as GPipe.
// ZB-H1 (zero bubble, Qi et al. 2023, arXiv 2401.10241): backward split into B (the input
// gradient, which the previous stage waits for) and W (the weight gradient, which nobody waits
// for). Stage s runs 1F1B's order of forwards and B's with its first s B's moved ahead of their W,
// so W runs s micro-batches behind B and fills what would be bubbles: at most p - s micro-batches
// hold whole activations (as in 1F1B) and s more only what W needs. W's run in micro-batch order,
// so the weight gradients sum in 1F1B's order: the same bits. Needs m >= p for its full effect.
// All are deadlock-free when sends never block (each stage's inbox takes any tensor): a stage only
// waits for what an earlier action of a neighbour produces. Theory bubble: 1F1B and GPipe
// (p - 1) / (m + p - 1); ZB-H1 (p - 1) / (3m + p - 1) when m >= p (equal F, B and W times).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ls {

enum class ScheduleKind { k1F1B, kGPipe, kZBH1 };
const char* schedule_name(ScheduleKind kind);  // "1f1b", "gpipe", "zb-h1"
// "1f1b", "gpipe" or "zb-h1"; anything else is an ls::Error naming it and the choices.
ScheduleKind parse_schedule(const std::string& name);
// Whether the schedule splits backward into B (kBackward) and W (kWeight) actions.
bool splits_backward(ScheduleKind kind);

struct PipelineAction {
  // kBackward: the whole backward, or only its input gradient (B) where the schedule splits
  // backward; kWeight: the weight gradient (W) of a micro-batch whose B has run.
  enum class Kind { kForward, kBackward, kWeight };
  Kind kind = Kind::kForward;
  int micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};
const char* action_name(PipelineAction::Kind kind);  // "forward", "backward", "weight gradient"

// actions[s] is stage s's order. stages >= 1 and micro_batches >= 1, else an ls::Error.
std::vector<std::vector<PipelineAction>> pipeline_schedule(int stages, int micro_batches,
                                                           ScheduleKind kind);

// Splits L consecutive layers into `stages` consecutive ranges [first, end), near-equal by the
// number of layers that hold parameters (a layer without any, such as ReLU, goes with the one
// before it; leading ones with the first): stages get floor or ceil of (such layers / stages),
// the later stages the extra ones. An ls::Error when there are fewer such layers than stages.
std::vector<std::pair<int, int>> split_layers(const std::vector<bool>& has_parameters, int stages);

// The idle fraction of the schedule on an ideal pipeline: equal stages, free transfers, and a
// backward twice a forward (B and W each as long as F where the schedule splits them). Obtained
// by running the schedule on that model: (p-1)/(m+p-1) for 1F1B and GPipe, (p-1)/(3m+p-1) for
// ZB-H1 when m >= p (lockstep's ZB-H1 falls short of that formula only when m < p).
double theoretical_bubble(int stages, int micro_batches,
                          ScheduleKind kind = ScheduleKind::k1F1B);

}  // namespace ls
