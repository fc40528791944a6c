// The verdict of lockstep/device_use.h: which finding applies, and one sentence that says it with
// the numbers behind it.
#include <lockstep/device_use.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <lockstep/json.h>

namespace ls {
namespace {

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * share);
  return text;
}

std::string milliseconds(double ms) {
  char text[24];
  std::snprintf(text, sizeof text, ms < 10 ? "%.2f ms" : "%.1f ms", ms);
  return text;
}

double per_step(const DeviceUse& d, double ms) {
  return d.steps > 0 ? ms / static_cast<double>(d.steps) : 0.0;
}

// "host:0 / host:1 / host:2" of the named devices' values.
template <typename Value>
std::string joined(const std::vector<DeviceUse>& devices, const std::vector<int>& which,
                   Value value) {
  std::string out;
  for (size_t i = 0; i < which.size(); ++i) {
    if (i > 0) out += " / ";
    out += value(devices[static_cast<size_t>(which[i])]);
  }
  return out;
}

std::string device_names(const std::vector<DeviceUse>& devices, const std::vector<int>& which) {
  std::string out;
  for (size_t i = 0; i < which.size(); ++i) {
    if (i > 0) out += i + 1 == which.size() ? " and " : ", ";
    out += devices[static_cast<size_t>(which[i])].name();
  }
  return out;
}

std::vector<int> all_of(const std::vector<DeviceUse>& devices) {
  std::vector<int> all(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

// Devices waiting for their input: mostly between steps (the caller's next batch) or mostly in
// their own copy in.
void say_input_bound(UseVerdict& v) {
  const auto& d = v.devices;
  double idle = 0, input = 0;
  for (int i : v.named) {
    idle += d[static_cast<size_t>(i)].share(d[static_cast<size_t>(i)].idle_ms);
    input += d[static_cast<size_t>(i)].share(d[static_cast<size_t>(i)].input_ms);
  }
  const bool all = v.named.size() == d.size();
  const std::string who = all && d.size() > 1 ? "all " + std::to_string(d.size()) + " devices"
                          : all               ? "the device"
                                              : "device " + device_names(d, v.named);
  if (idle >= input) {
    v.sentence =
        who + " idle " +
        joined(d, v.named, [](const DeviceUse& u) { return percent(u.share(u.idle_ms)); }) +
        " of each step between steps, waiting for the next batch: the input "
        "pipeline (data loading, or the caller's code between steps) is the "
        "bottleneck; raise the loader's prefetch depth or make batches ready sooner";
  } else {
    v.sentence =
        who + " spend" + (v.named.size() == 1 && !all ? "s " : " ") +
        joined(d, v.named, [](const DeviceUse& u) { return percent(u.share(u.input_ms)); }) +
        " of each step receiving the step's input (staged and copied in, " +
        joined(d, v.named,
               [](const DeviceUse& u) { return milliseconds(per_step(u, u.input_ms)); }) +
        " per step)" +
        (all ? ": copying the input in" : " while the others wait for it: its input path") +
        " is the bottleneck";
  }
}

void say_unbalanced(UseVerdict& v, const std::vector<int>& waiting) {
  const auto& d = v.devices;
  const DeviceUse& slow = d[static_cast<size_t>(v.slowest)];
  const double exposed = v.exposed_comm_share;
  v.sentence =
      "device " + device_names(d, waiting) + " wait" + (waiting.size() == 1 ? "s " : " ") +
      joined(d, waiting,
             [exposed](const DeviceUse& u) { return percent(u.share(u.comm_wait_ms) - exposed); }) +
      " of each step for " + slow.name() + ", the slowest (compute " +
      milliseconds(per_step(slow, slow.compute_ms + slow.input_ms)) + " per step against " +
      joined(
          d, waiting,
          [](const DeviceUse& u) { return milliseconds(per_step(u, u.compute_ms + u.input_ms)); }) +
      "): the devices are unbalanced; look for what slows " + slow.name() +
      " (another job on it, a slower device, a larger shard)";
}

// Stages waiting for their neighbours: the schedule's own bubble (more micro-batches shrink it),
// or, when the wait is well past it, stages of unequal work (the layers are split unevenly).
void say_pipeline_bubble(UseVerdict& v) {
  const auto& d = v.devices;
  const bool one = v.named.size() == 1;
  const std::string who =
      "pipeline stage" + std::string(one ? " " : "s ") + device_names(d, v.named) + " wait" +
      (one ? "s " : " ") +
      joined(d, v.named, [](const DeviceUse& u) { return percent(u.share(u.bubble_ms)); }) +
      " of each step for " + (one ? "its" : "their") + " neighbours";
  double worst = 0;
  for (int i : v.named) {
    const DeviceUse& u = d[static_cast<size_t>(i)];
    worst = std::max(worst, u.share(u.bubble_ms));
  }
  if (v.pipeline_theory >= 0 && worst > v.pipeline_theory + 0.10) {
    size_t busiest = 0;
    for (size_t i = 1; i < d.size(); ++i) {
      if (per_step(d[i], d[i].compute_ms) > per_step(d[busiest], d[busiest].compute_ms))
        busiest = i;
    }
    std::vector<int> all = all_of(d);
    v.sentence =
        who + ", far more than the schedule's own bubble (" + percent(v.pipeline_theory) +
        "): the stages' work is unequal (compute " +
        joined(d, all, [](const DeviceUse& u) { return milliseconds(per_step(u, u.compute_ms)); }) +
        " per step on " + device_names(d, all) + "); move layers from " + d[busiest].name() +
        "'s stage to the others";
    return;
  }
  std::string theory;
  if (v.pipeline_theory >= 0)
    theory = " (the schedule's own bubble is " + percent(v.pipeline_theory) + ")";
  v.sentence = who + "' activations and gradients" + theory +
               ": more micro-batches per step (--micro-batches) shrink the bubble";
}

void say_communication_bound(UseVerdict& v) {
  v.sentence = "communication is exposed " + percent(v.exposed_comm_share) +
               " of each step on every device (backward ends, then the gradient all-reduce "
               "goes on alone): raise the bucket size, reduce gradients in bf16, or give each "
               "device a larger batch";
}

void say_all_used(UseVerdict& v) {
  const auto& d = v.devices;
  const std::string count =
      d.size() == 1 ? "the device is" : "all " + std::to_string(d.size()) + " devices are";
  v.sentence =
      count + " busy " +
      joined(d, v.named, [](const DeviceUse& u) { return percent(u.share(u.compute_ms)); }) +
      " of each step computing";
  if (d.size() > 1) {
    v.sentence += ", communication " + percent(v.exposed_comm_share) +
                  " exposed: " + (d.size() == 2 ? "both are used" : "all are used");
  } else {
    v.sentence += ": it is used";
  }
}

}  // namespace

const char* finding_name(UseVerdict::Finding finding) {
  switch (finding) {
    case UseVerdict::Finding::kNotMeasured:
      return "not_measured";
    case UseVerdict::Finding::kAllUsed:
      return "all_used";
    case UseVerdict::Finding::kInputBound:
      return "input_bound";
    case UseVerdict::Finding::kPipelineBubble:
      return "pipeline_bubble";
    case UseVerdict::Finding::kUnbalanced:
      return "unbalanced";
    case UseVerdict::Finding::kCommunicationBound:
      return "communication_bound";
  }
  return "?";
}

UseVerdict judge_device_use(std::vector<DeviceUse> devices, double pipeline_theory) {
  UseVerdict v;
  v.devices = std::move(devices);
  v.pipeline_theory = pipeline_theory;
  const auto& d = v.devices;
  const bool measured = !d.empty() && std::all_of(d.begin(), d.end(), [](const DeviceUse& u) {
    return u.steps > 0 && u.window_ms > 0;
  });
  if (!measured) {
    v.sentence = "no step was measured (the first steps are warm-up; run more steps)";
    return v;
  }
  v.exposed_comm_share = 1.0;
  for (const DeviceUse& u : d)
    v.exposed_comm_share = std::min(v.exposed_comm_share, u.share(u.comm_wait_ms));
  if (d.size() > 1) {  // the one the others wait for: the most time on its own work
    v.slowest = 0;
    for (size_t i = 1; i < d.size(); ++i) {
      const DeviceUse& s = d[static_cast<size_t>(v.slowest)];
      if (d[i].share(d[i].compute_ms + d[i].input_ms) > s.share(s.compute_ms + s.input_ms)) {
        v.slowest = static_cast<int>(i);
      }
    }
  }
  // Waiting for input and (pipelines) waiting for neighbours: the larger one is the finding.
  std::vector<int> input_bound, bubble_bound;
  double input_worst = 0, bubble_worst = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double input = d[i].share(d[i].idle_ms + d[i].input_ms);
    const double bubble = d[i].share(d[i].bubble_ms);
    if (input >= kVerdictThreshold) input_bound.push_back(static_cast<int>(i));
    if (bubble >= kVerdictThreshold) bubble_bound.push_back(static_cast<int>(i));
    input_worst = std::max(input_worst, input);
    bubble_worst = std::max(bubble_worst, bubble);
  }
  if (!input_bound.empty() && input_worst >= bubble_worst) {
    v.finding = UseVerdict::Finding::kInputBound;
    v.named = input_bound;
    say_input_bound(v);
    return v;
  }
  if (!bubble_bound.empty()) {
    v.finding = UseVerdict::Finding::kPipelineBubble;
    v.named = bubble_bound;
    say_pipeline_bubble(v);
    return v;
  }
  std::vector<int> waiting;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i].share(d[i].comm_wait_ms) - v.exposed_comm_share >= kVerdictThreshold) {
      waiting.push_back(static_cast<int>(i));
    }
  }
  if (!waiting.empty()) {
    v.finding = UseVerdict::Finding::kUnbalanced;
    v.named = waiting;
    v.named.insert(v.named.begin(), v.slowest);
    say_unbalanced(v, waiting);
    return v;
  }
  v.named = all_of(d);
  if (d.size() > 1 && v.exposed_comm_share >= kVerdictThreshold) {
    v.finding = UseVerdict::Finding::kCommunicationBound;
    say_communication_bound(v);
    return v;
  }
  v.finding = UseVerdict::Finding::kAllUsed;
  say_all_used(v);
  return v;
}

std::vector<std::string> use_verdict_lines(const UseVerdict& verdict) {
  std::vector<std::string> lines;
  for (const DeviceUse& u : verdict.devices) {
    char bubble[32] = "";
    if (verdict.pipeline_theory >= 0) {
      std::snprintf(bubble, sizeof bubble, "  bubble %5.1f%%", 100 * u.share(u.bubble_ms));
    }
    char line[320];
    std::snprintf(line, sizeof line,
                  "  %-*s compute %5.1f%%  input %5.1f%%  comm wait %5.1f%%  idle %5.1f%%%s  (%lld "
                  "steps, %s per step)",
                  u.process < 0 ? 8 : 20, u.name().c_str(), 100 * u.share(u.compute_ms), 100 * u.share(u.input_ms),
                  100 * u.share(u.comm_wait_ms), 100 * u.share(u.idle_ms), bubble,
                  static_cast<long long>(u.steps), milliseconds(per_step(u, u.window_ms)).c_str());
    lines.emplace_back(line);
  }
  lines.push_back("verdict: " + verdict.sentence);
  return lines;
}

std::string use_verdict_json(const UseVerdict& verdict) {
  JsonWriter json;
  write_use_verdict(json, verdict);
  return json.str();
}

void write_use_verdict(JsonWriter& json, const UseVerdict& verdict) {
  json.begin_object()
      .field("finding", finding_name(verdict.finding))
      .field("sentence", verdict.sentence)
      .field("exposed_comm_share", verdict.exposed_comm_share)
      .field("pipeline_theory", verdict.pipeline_theory)
      .field("slowest", verdict.slowest >= 0
                            ? verdict.devices[static_cast<size_t>(verdict.slowest)].name()
                            : std::string());
  json.key("devices").begin_array();
  for (const DeviceUse& u : verdict.devices) {
    json.begin_object()
        .field("device", u.device.str())
        .field("replica", u.replica)
        .field("process", u.process)
        .field("steps", u.steps)
        .field("window_ms", u.window_ms)
        .field("input_ms", u.input_ms)
        .field("compute_ms", u.compute_ms)
        .field("comm_wait_ms", u.comm_wait_ms)
        .field("idle_ms", u.idle_ms)
        .field("bubble_ms", u.bubble_ms)
        .end_object();
  }
  json.end_array().end_object();
}

}  // namespace ls
