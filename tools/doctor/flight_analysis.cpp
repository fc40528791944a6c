// lockstep-doctor --flight: tools/doctor/flight_analysis.h says what and why.
#include "tools/doctor/flight_analysis.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <lockstep/error.h>
#include "engine/core/json_reader.h"
#include "parallel/comm/collective.h"

namespace ls::doctor {
namespace {

// ---- reading -------------------------------------------------------------------------------

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LS_CHECK_AS(ErrorKind::kIo, in.good(), path,
              ": cannot read it; pass the flight recorder files a hang or desync error named");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const JsonValue& member(const JsonValue& object, const char* key, const std::string& path) {
  const JsonValue* v = object.find(key);
  LS_CHECK(v != nullptr, path, ": no \"", key, "\" (byte ", object.offset(),
           "); is this a lockstep flight recorder file?");
  return *v;
}

FlightCollective collective_of(const JsonValue& c, const std::string& path) {
  FlightCollective out;
  out.seq = member(c, "seq", path).as_int64();
  out.op = member(c, "op", path).as_string();
  out.label = member(c, "label", path).as_string();
  out.dtype = member(c, "dtype", path).as_string();
  out.count = member(c, "count", path).as_int64();
  out.reduce = member(c, "reduce", path).as_string();
  out.root = member(c, "root", path).as_int64();
  out.bytes = member(c, "bytes", path).as_int64();
  out.state = member(c, "state", path).as_string();
  out.age_ms = member(c, "age_ms", path).as_double();
  return out;
}

FlightReplica replica_of(const JsonValue& r, int process, const std::string& path) {
  FlightReplica out;
  out.replica = static_cast<int>(member(r, "replica", path).as_int64());
  out.process = process;
  out.device = member(r, "device", path).as_string();
  out.phase = member(r, "phase", path).as_string();
  out.step = member(r, "step", path).as_int64();
  out.waiting_for = member(r, "waiting_for", path).as_string();
  for (const JsonValue& c : member(r, "collectives", path).items()) {
    out.collectives.push_back(collective_of(c, path));
  }
  return out;
}

FlightStage stage_of(const JsonValue& s, int process, const std::string& path) {
  FlightStage out;
  out.stage = static_cast<int>(member(s, "stage", path).as_int64());
  out.pipeline = static_cast<int>(member(s, "pipeline", path).as_int64());
  out.process = process;
  out.device = member(s, "device", path).as_string();
  out.step = member(s, "step", path).as_int64();
  out.host = member(s, "host", path).as_string();
  out.actions_done = static_cast<int>(member(s, "actions_done", path).as_int64());
  out.actions_enqueued = static_cast<int>(member(s, "actions_enqueued", path).as_int64());
  out.actions = static_cast<int>(member(s, "actions", path).as_int64());
  out.next_action = member(s, "next_action", path).as_string();
  const bool known = out.next_action.empty() || out.next_action.rfind("forward of ", 0) == 0 ||
                     out.next_action.rfind("backward of ", 0) == 0 ||
                     out.next_action.rfind("weight gradient of ", 0) == 0;
  LS_CHECK(known, path, ": stage ", out.stage, "'s next_action '", out.next_action,
           "' is not \"forward of micro-batch K\", \"backward of micro-batch K\" or \"weight "
           "gradient of micro-batch K\"; is this a lockstep flight recorder file?");
  // A weight gradient's input is the stage's own backward, which ran before it.
  LS_CHECK(out.next_action.rfind("weight gradient of ", 0) != 0 ||
               member(s, "input_ready", path).as_bool(),
           path, ": stage ", out.stage, "'s next action is a weight gradient, whose input is "
           "always ready, but input_ready is false; is this a lockstep flight recorder file?");
  out.input_ready = member(s, "input_ready", path).as_bool();
  return out;
}

// ---- analysing -----------------------------------------------------------------------------

std::string name_of(const FlightStage& s) {
  return "stage " + std::to_string(s.stage) + " of pipeline " + std::to_string(s.pipeline) +
         " (" + s.device + ")";
}

// The stages of a Pipeline's stall: the one inside an action whose input has arrived (the one
// the others wait for), those whose host thread has not enqueued its next action, and what
// every other unfinished stage waits for.
std::vector<std::string> stalled_stages(const FlightFiles& files) {
  std::vector<std::string> stalled, waiting;
  for (const FlightStage& s : files.stages) {
    if (s.actions_done >= s.actions) continue;
    const std::string progress = " (its device ran " + std::to_string(s.actions_done) + " of " +
                                 std::to_string(s.actions) + " actions of step " +
                                 std::to_string(s.step) + "; its host thread is in " + s.host +
                                 ")";
    if (s.input_ready && s.actions_done < s.actions_enqueued) {
      stalled.push_back(name_of(s) + " stalled in " + s.next_action +
                        ": its input has arrived and the action is enqueued, but the device has "
                        "not finished it; the other stages wait for it" +
                        progress);
    } else if (s.input_ready) {
      stalled.push_back(name_of(s) + " never enqueued " + s.next_action +
                        ", whose input has arrived: its host thread is stuck" + progress);
    } else {
      const bool forward = s.next_action.rfind("forward", 0) == 0;
      const std::string micro = s.next_action.substr(s.next_action.find(" of ") + 4);
      waiting.push_back(name_of(s) + " waits for " +
                        (forward ? "the activations of " + micro + " from stage " +
                                       std::to_string(s.stage - 1)
                                 : "the gradient of " + micro + " from stage " +
                                       std::to_string(s.stage + 1)) +
                        " for its " + s.next_action + progress);
    }
  }
  stalled.insert(stalled.end(), waiting.begin(), waiting.end());
  return stalled;
}

// What every replica must issue alike (same_collective's fingerprint, by name).
bool same(const FlightCollective& a, const FlightCollective& b) {
  return a.op == b.op && a.dtype == b.dtype && a.count == b.count && a.reduce == b.reduce &&
         a.root == b.root;
}

int64_t last_issued(const FlightReplica& r) {
  int64_t last = 0;
  for (const FlightCollective& c : r.collectives) last = std::max(last, c.seq);
  return last;
}

const FlightCollective* find_seq(const FlightReplica& r, int64_t seq) {
  for (const FlightCollective& c : r.collectives) {
    if (c.seq == seq) return &c;
  }
  return nullptr;
}

std::string name_of(const FlightReplica& r) {
  return "replica " + std::to_string(r.replica) + " (" + r.device + ")";
}

std::string list_of(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out;
}

// The first sequence number whose collective differs between replicas.
std::optional<std::string> disagreement(const FlightFiles& files) {
  std::map<int64_t, std::vector<std::pair<const FlightReplica*, const FlightCollective*>>> by_seq;
  for (const FlightReplica& r : files.replicas) {
    for (const FlightCollective& c : r.collectives) by_seq[c.seq].push_back({&r, &c});
  }
  for (const auto& [seq, issued] : by_seq) {
    for (size_t i = 1; i < issued.size(); ++i) {
      if (same(*issued[0].second, *issued[i].second)) continue;
      return "collectives disagree at #" + std::to_string(seq) + ": " + name_of(*issued[0].first) +
             " issued " + describe_flight_collective(*issued[0].second) + ", " +
             name_of(*issued[i].first) + " issued " +
             describe_flight_collective(*issued[i].second) +
             ": the replicas ran different code or shapes (a desync), not a slow link";
    }
  }
  return std::nullopt;
}

// The replicas that never issued a collective some other replica issued.
std::vector<std::string> behind(const FlightFiles& files) {
  int64_t newest = 0;
  for (const FlightReplica& r : files.replicas) newest = std::max(newest, last_issued(r));
  std::vector<std::string> out;
  for (const FlightReplica& r : files.replicas) {
    const int64_t last = last_issued(r);
    if (last >= newest) continue;
    const FlightCollective* own = find_seq(r, last);
    if (own != nullptr && own->state == "refused") {  // it stopped there: the desync's other side
      out.push_back(name_of(r) + " stopped at #" + std::to_string(last) +
                    ", which the desync check refused, in " + r.phase + " of step " +
                    std::to_string(r.step));
      continue;
    }
    const int64_t missing = last + 1;
    const FlightCollective* theirs = nullptr;
    std::vector<std::string> issuers;
    for (const FlightReplica& other : files.replicas) {
      if (const FlightCollective* c = find_seq(other, missing)) {
        theirs = theirs != nullptr ? theirs : c;
        issuers.push_back("replica " + std::to_string(other.replica));
      }
    }
    std::string line = name_of(r) + " is behind: it never issued #" + std::to_string(missing);
    if (theirs != nullptr) {
      line +=
          ", " + describe_flight_collective(*theirs) + ", which " + list_of(issuers) + " issued";
    }
    line += own != nullptr
                ? "; its last collective is #" + std::to_string(last) + " (" + own->state + ")"
                : "; it issued no collective the recorder kept";
    line += ", and it is in " + r.phase + " of step " + std::to_string(r.step);
    out.push_back(line);
  }
  return out;
}

// The replicas inside a started collective that has not completed.
std::vector<std::string> waiting(const FlightFiles& files) {
  std::vector<std::string> out;
  for (const FlightReplica& r : files.replicas) {
    for (const FlightCollective& c : r.collectives) {
      if (c.state != "started") continue;
      char age[32];
      std::snprintf(age, sizeof age, "%.1f s", c.age_ms / 1000.0);
      std::string line = name_of(r) + " waits in " + describe_flight_collective(c) + ", enqueued " +
                         age + " before the file was written";
      if (!r.waiting_for.empty()) line += " (waiting for " + r.waiting_for + ")";
      out.push_back(line);
    }
  }
  return out;
}

}  // namespace

std::string describe_flight_collective(const FlightCollective& c) {
  CollectiveDesc desc;
  bool known = false;
  for (CollectiveKind k :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
        CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
    if (collective_name(k) == c.op) desc.kind = k, known = true;
  }
  for (DType t : {DType::kF32, DType::kBF16, DType::kI32}) {
    if (dtype_name(t) == c.dtype) desc.dtype = t;
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    if (reduce_op_name(op) == c.reduce) desc.op = op;
  }
  if (!known) return c.op + " #" + std::to_string(c.seq) + " (" + c.label + ")";
  desc.count = static_cast<size_t>(c.count);
  desc.root = static_cast<int>(c.root);
  desc.seq = c.seq;
  desc.label = c.label;
  return describe(desc);
}

FlightFiles read_flight_files(const std::vector<std::string>& paths) {
  LS_CHECK(!paths.empty(), "--flight needs at least one file");
  FlightFiles files;
  std::set<int> replicas_seen;
  std::set<std::pair<int, int>> stages_seen;  // (pipeline, stage)
  for (const std::string& path : paths) {
    const JsonValue root = parse_json(read_text(path), path, JsonLimits{.max_bytes = 64 << 20});
    LS_CHECK(root.is_object(), path, ": not a lockstep flight recorder file (a JSON object)");
    const JsonValue* format = root.find("format");
    LS_CHECK(format != nullptr && format->is_string() && format->as_string() == "lockstep-flight/1",
             path,
             ": not a lockstep flight recorder file (its \"format\" is not \"lockstep-flight/1\")");
    files.reasons.push_back(member(root, "reason", path).as_string());
    const int process = static_cast<int>(member(root, "process", path).as_int64());
    const int processes = static_cast<int>(member(root, "processes", path).as_int64());
    if (files.processes_read.empty()) files.processes = processes;
    LS_CHECK(processes == files.processes, path, ": says the run had ", processes,
             " processes where ", paths.front(), " says ", files.processes,
             "; pass the files of one run");
    LS_CHECK(std::find(files.processes_read.begin(), files.processes_read.end(), process) ==
                 files.processes_read.end(),
             path, ": process ", process, "'s file was given already; pass each process's once");
    files.processes_read.push_back(process);
    for (const JsonValue& r : member(root, "replicas", path).items()) {
      FlightReplica replica = replica_of(r, process, path);
      LS_CHECK(replicas_seen.insert(replica.replica).second, path, ": replica ", replica.replica,
               " is in another file too; pass the files of one run");
      files.replicas.push_back(std::move(replica));
    }
    if (const JsonValue* stages = root.find("stages")) {
      for (const JsonValue& s : stages->items()) {
        FlightStage stage = stage_of(s, process, path);
        LS_CHECK(stages_seen.insert({stage.pipeline, stage.stage}).second, path, ": stage ",
                 stage.stage, " of pipeline ", stage.pipeline,
                 " is in another file too; pass the files of one run");
        files.stages.push_back(std::move(stage));
      }
    }
  }
  std::sort(files.replicas.begin(), files.replicas.end(),
            [](const FlightReplica& a, const FlightReplica& b) { return a.replica < b.replica; });
  std::sort(files.stages.begin(), files.stages.end(),
            [](const FlightStage& a, const FlightStage& b) {
              return std::pair(a.pipeline, a.stage) < std::pair(b.pipeline, b.stage);
            });
  return files;
}

std::vector<std::string> analyse_flight(const FlightFiles& files) {
  std::vector<std::string> out;
  if (const std::optional<std::string> differ = disagreement(files)) out.push_back(*differ);
  for (std::string& line : behind(files)) out.push_back(std::move(line));
  for (std::string& line : waiting(files)) out.push_back(std::move(line));
  for (std::string& line : stalled_stages(files)) out.push_back(std::move(line));
  std::vector<std::string> missing;
  for (int p = 0; p < files.processes; ++p) {
    if (std::find(files.processes_read.begin(), files.processes_read.end(), p) ==
        files.processes_read.end()) {
      missing.push_back(std::to_string(p));
    }
  }
  if (!missing.empty()) {
    out.push_back("no file from process " + list_of(missing) + " of " +
                  std::to_string(files.processes) +
                  ": its replicas are not analysed; pass every process's file");
  }
  if (out.empty() && !files.stages.empty()) {
    const bool crash = files.reasons.front() == "fatal signal";
    out.push_back("every stage ran all its actions of step " +
                  std::to_string(files.stages.front().step) + ": the " +
                  (crash ? "crash" : "stall") +
                  " came after them (the gradient sums across pipelines, the optimizer, or "
                  "between steps)");
  } else if (out.empty()) {
    int64_t newest = 0;
    for (const FlightReplica& r : files.replicas) newest = std::max(newest, last_issued(r));
    out.push_back("every replica issued and completed the same collectives, through #" +
                  std::to_string(newest) +
                  ": none is missing or stuck, so the stall was outside the collectives");
  }
  return out;
}

}  // namespace ls::doctor
