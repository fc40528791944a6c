// lockstep-doctor --flight FILE...: what the flight recorder files of a hang or a desync say
// (written by DataParallel and Pipeline, one per process; format: parallel/observability/flight_dump.h). The
// files of several processes are read together, as one set of replicas. Findings, one sentence
// each, in this order:
//   - collectives that disagree: the first sequence number whose collective differs between
//     replicas (op, dtype, count, reduction, root), naming both ("sizes disagree")
//   - replicas behind: each replica that never issued a collective others issued, with that
//     collective, its own last one and where it was (phase, step); or, when its last one was
//     refused by the desync check, that it stopped there
//   - replicas waiting: each replica stuck in a started, uncompleted collective, and for how long
//   - a Pipeline's stages: the stage stalled inside an action whose input has arrived, the
//     stages whose host thread never enqueued their next action, and what each other stage
//     waits for (whose activations or gradient, of which micro-batch)
//   - processes whose file is missing, when the files say there were more
//   - otherwise, that every replica completed the same collectives (the stall is elsewhere), or
//     that every stage ran all its actions (the stall came after them)
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls::doctor {

struct FlightCollective {
  int64_t seq = 0;
  std::string op, label, dtype, reduce, state;  // enqueued, started, completed, refused
  int64_t count = 0, root = -1, bytes = 0;
  double age_ms = 0;
};

struct FlightReplica {
  int replica = 0, process = 0;
  std::string device, phase, waiting_for;
  int64_t step = 0;
  std::vector<FlightCollective> collectives;  // oldest first
};

// A Pipeline's stage (its stall's file): where its host thread and device are in the step.
struct FlightStage {
  int stage = 0, pipeline = 0, process = 0;
  std::string device, host, next_action;
  int64_t step = 0;
  int actions_done = 0, actions_enqueued = 0, actions = 0;
  bool input_ready = false;
};

struct FlightFiles {
  std::vector<std::string> reasons;  // per file: "timeout" or "desync"
  int processes = 1;                 // as the files say
  std::vector<int> processes_read;
  std::vector<FlightReplica> replicas;  // by replica number
  std::vector<FlightStage> stages;      // a Pipeline's, by pipeline and stage
};

// Reads the files. Raises ls::Error naming the file and what is wrong: unreadable (kind io), not
// JSON, not a lockstep-flight/1 file, a replica in two files, files of different runs (usage).
FlightFiles read_flight_files(const std::vector<std::string>& paths);

// The findings about the replicas, as the top of this file lists them.
std::vector<std::string> analyse_flight(const FlightFiles& files);

// "all_reduce #42 (bucket 3, 1.0 MiB) [f32, count=262144, sum]", as the watchdog writes it.
std::string describe_flight_collective(const FlightCollective& c);

}  // namespace ls::doctor
