// StepTrace: the Chrome trace-event file of lockstep/trainer.h's TraceOptions (issue 25).
//
// Built from what every step measures anyway: the step marks each device stamps on its own
// clock (step_marks.h), the reducer's launch marks on the communication stream
// (Reducer::launch_marks), and the caller's thread timing its own calls. Device clocks become
// the host's steady clock through each device's offset (Replica::clock_offset_ns; 0 on host
// devices, which stamp that clock), so all devices share one time line, and so do processes on
// one machine (the steady clock is the machine's).
//
// The file is {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"producer":
// "lockstep", "process", "first_step", "last_step", "origin_ns": the steady clock at ts 0}}, with:
//   "M" metadata events naming the process ("lockstep process P") and every track;
//   "X" complete events (ts and dur in microseconds, 3 decimals, from the first event):
//     tid 1, the caller's thread: "step N enqueued", "step N result (waiting)", "checkpoint
//       save", and the application's own spans on it (Trainer::trace_span: "waiting for the
//       next batch" in lockstep-train);
//     tid 12 + 3i, device i's host thread (the replica's or the stage's own): "issue step N"
//       and "collect step N" (a pipeline stage: "run step N" and "optimizer step N");
//     tid 10 + 3n + k (n devices), the application's other threads (Trainer::trace_span:
//       lockstep-train's "data loader", "gather batch E.I"), kept where they overlap the traced
//       steps;
//     tid 10 + 3i, device i's compute stream: "input", "forward + backward", "waiting for
//       gradient sums", "loss + optimizer", each with args {step}; within forward + backward,
//       "<layer> forward" and "<layer> backward" for every layer the model marks (Tape::
//       begin_layer: Sequential's children "0", "1", ...; a transformer's "embeddings", "h.N",
//       "head"), nested as the layers are;
//     tid 11 + 3i, device i's communication stream: one span per all-reduce launch, "buckets
//       A-B all-reduce" with args {step, bytes, buckets};
//   a pipeline's stages (tid 10 + 3i, stage i's compute stream): per step "input", "forward
//     micro-batch K" and "backward micro-batch K" for each action (from its input's arrival),
//     "stage gradient sums" and "optimizer"; the caller's thread: "step N";
//   "C" counter events "<device> memory in use" (args {MiB}) at each traced step's end.
// Spans of one track nest or follow one another: a track is a stream (or one thread), which
// runs in order. Spans have args {step}, but for the application's spans, which belong to no step.
// Thread-safety: thread_span and device_thread_span from any thread; the rest from the caller's.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/trainer.h>
#include "parallel/observability/layer_clock.h"
#include "parallel/observability/step_marks.h"
#include "parallel/observability/stage_timeline.h"

namespace ls {

class StepTrace {
 public:
  struct DeviceTrack {
    Device device;
    std::string role;                   // "replica 0", "stage 1": names its tracks
    int64_t clock_offset_ns = 0;        // host steady clock - device clock
    std::vector<int64_t> bucket_bytes;  // what each gradient bucket's all-reduce carries
  };
  // What one device did in one traced step.
  struct DeviceStep {
    StepMarks marks;
    std::vector<int64_t> launch_ns;  // per bucket: launch start, end (device clock)
    int64_t memory_in_use = 0;       // bytes, when the step's result arrived
    std::vector<int64_t> layer_ns;   // the layers' stamps (device clock), as layer_points says
    std::shared_ptr<const LayerStamps> layer_points;
  };

  // `options.path` must not be empty; checks the step range (a usage error names it).
  StepTrace(TraceOptions options, int process, std::vector<DeviceTrack> devices);

  bool traces(int64_t step) const {
    return step >= options_.first_step && step <= options_.last_step && !written_;
  }
  // Times below are the host's steady clock (lockstep/clock.h), in nanoseconds.
  // A span of the caller's thread in traced step `step`.
  void caller_span(std::string name, int64_t step, int64_t begin_ns, int64_t end_ns);
  // A span of one of the application's threads, named `thread` (kCallerThread: the caller's),
  // kept if it overlaps the traced steps (Trainer::trace_span). Any thread; one branch once the
  // file is written. Before the first traced step, at least the last kHeldBefore are held.
  void thread_span(const std::string& thread, std::string name, int64_t begin_ns, int64_t end_ns);
  // A span of device i's host thread (the replica's or stage's) in traced step `step`.
  void device_thread_span(size_t device, std::string name, int64_t step, int64_t begin_ns,
                          int64_t end_ns);
  // Every local device's part of a traced step (in device order); writes the file after the
  // last traced step.
  void add_step(int64_t step, const std::vector<DeviceStep>& devices);
  // A pipeline's step: every local stage's timeline and its optimizer's end (device clock).
  struct StageStep {
    StageTimeline timeline;
    OptimizerSpan optimizer;
  };
  void add_pipeline_step(int64_t step, const std::vector<StageStep>& stages);
  // Writes what was traced, if anything and not written yet (the trainer's end).
  void finish();
  const std::string& path() const { return path_; }

  static constexpr size_t kHeldBefore = 256;

 private:
  struct Span {
    int tid;
    std::string name;
    int64_t begin_ns, end_ns;  // host steady clock
    int64_t step;         // -1: the application's span, of no step
    int64_t bytes = -1;   // launches: bytes carried
    std::string buckets;  // launches: "0-2"
  };
  struct Counter {
    int tid;
    int64_t at_ns;
    double mib;
  };
  // The application's threads' tracks come after every device's.
  int first_thread_tid() const { return 10 + 3 * static_cast<int>(devices_.size()); }
  // A span of a traced step (never an application's).
  void step_span(int tid, std::string name, int64_t step, int64_t begin_ns, int64_t end_ns);
  void write();
  // The application's spans that overlap the traced steps, moved into spans_.
  void keep_thread_spans_in_window();
  template <typename ToHost>
  void add_layer_spans(int tid, int64_t step, const DeviceStep& device, ToHost host);

  TraceOptions options_;
  int process_;
  std::string path_;
  std::vector<DeviceTrack> devices_;
  std::mutex mutex_;  // guards everything below but written_ (spans come from several threads)
  std::vector<Span> spans_;
  std::vector<Span> thread_spans_;          // the application's, until write()
  std::map<std::string, int> thread_tids_;  // application thread name -> tid
  std::vector<Counter> counters_;
  std::atomic<bool> written_{false};
};

// Checks a trace step range: 1 <= first <= last (a usage error otherwise).
void check_trace_options(const TraceOptions& options);

}  // namespace ls
