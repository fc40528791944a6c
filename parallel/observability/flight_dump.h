// The flight recorder on disk: when a run hangs (the watchdog's timeout) or its replicas desync,
// every replica's last collectives (RecordingCommunicator's ring, parallel/observability/
// flight_recorder.h) are written as one JSON file per process, which the error names and
// `lockstep-doctor --flight FILE...` analyses (tools/doctor/flight_analysis.h), the files of
// several processes together. The format, "lockstep-flight/1":
//   {"format": "lockstep-flight/1", "reason": "timeout" | "desync" | "fatal signal",
//    "time": "2026-12-05T12:00:00Z",
//    "process": 0, "processes": 1, "report": "<the error's text>",
//    "replicas": [{"replica": 0, "device": "host:0", "phase": "backward", "step": 17,
//                  "waiting_for": "", "collectives": [
//        {"seq": 41, "op": "all_reduce", "label": "bucket 3", "dtype": "f32", "count": 262144,
//         "reduce": "sum", "root": -1, "bytes": 1048576, "state": "completed", "age_ms": 12.5,
//         "in_graph": false}, ...]}]}
// Collectives are oldest first; state is "enqueued", "started" (waiting for peers or running),
// "completed", or "refused" (the desync checker stopped it: it differs from another replica's
// collective of that number); age_ms is how long ago it was enqueued.
// A Pipeline's stall writes its stages instead ("replicas" is then empty), each with where its
// host thread and its device are in the step's schedule:
//   "stages": [{"stage": 1, "pipeline": 0, "device": "host:1", "step": 3,
//               "host": "forward of micro-batch 2", "actions_done": 4, "actions_enqueued": 5,
//               "actions": 8, "next_action": "forward of micro-batch 2", "input_ready": true}]
// next_action is the first action the device has not finished ("" once all are), input_ready
// whether its input (the neighbour's activations or gradient) has arrived: a stage whose next
// action has its input is the one the others wait for.
// Thread-safety: a pure function of its arguments (the snapshots are taken by the caller).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "parallel/observability/watchdog.h"

namespace ls {

// Where one pipeline stage is in its step's schedule (a Pipeline's flight record).
struct StageProgress {
  int stage = 0, pipeline = 0;
  Device device;
  int64_t step = 0;
  std::string host;  // where its host thread is: "forward of micro-batch 2"
  int actions_done = 0, actions_enqueued = 0, actions = 0;
  std::string next_action;  // "forward of micro-batch 2"; empty when every action ran
  bool input_ready = false;
};

struct FlightRecord {
  std::string reason;  // "timeout", "desync" or "fatal signal"
  std::string report;  // the error's message
  int process = 0, processes = 1;
  std::vector<ReplicaProgress> replicas;
  std::vector<StageProgress> stages;  // a Pipeline's
  std::chrono::steady_clock::time_point now;  // when the snapshots were taken
};

// Writes `record` to DIR/lockstep-flight-<pid>-<n>-p<process>.json (n counts this process's
// files; the directory is created; empty dir: the system's temporary directory) and returns the
// path. Raises ls::Error (kind io) when it
// cannot be written.
std::string write_flight_record(const std::string& dir, const FlightRecord& record);

// The sentence an error appends for the file: "; the last collectives of every replica are in
// PATH (lockstep-doctor --flight PATH)", or, when writing failed, why.
std::string flight_record_note(const std::string& dir, const FlightRecord& record);

}  // namespace ls
