#include "parallel/observability/step_trace.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include <lockstep/error.h>
#include <lockstep/json.h>

namespace ls {
namespace {

// Track ids: the caller 1; device i's compute stream, communication stream and host thread
// 10 + 3i, 11 + 3i, 12 + 3i; the application's threads after every device's (first_thread_tid).
constexpr int kCallerTid = 1;
int compute_tid(size_t device) { return 10 + 3 * static_cast<int>(device); }
int comm_tid(size_t device) { return 11 + 3 * static_cast<int>(device); }
int device_thread_tid(size_t device) { return 12 + 3 * static_cast<int>(device); }
size_t device_of(int tid) { return static_cast<size_t>((tid - 10) / 3); }

}  // namespace

void check_trace_options(const TraceOptions& options) {
  LS_CHECK_AS(ErrorKind::kUsage, options.first_step >= 1 && options.first_step <= options.last_step,
              "trace steps ", options.first_step, ":", options.last_step,
              " are not a range of steps; give FIRST:LAST with 1 <= FIRST <= LAST (e.g. 4:8)");
}

StepTrace::StepTrace(TraceOptions options, int process, std::vector<DeviceTrack> devices)
    : options_(std::move(options)), process_(process), devices_(std::move(devices)) {
  LS_ASSERT(!options_.path.empty());
  check_trace_options(options_);
  path_ = process_ == 0 ? options_.path : options_.path + ".process-" + std::to_string(process_);
  // Said now, not after the traced steps have run.
  const std::filesystem::path folder =
      std::filesystem::absolute(std::filesystem::path(path_)).parent_path();
  LS_CHECK_AS(ErrorKind::kIo, ::access(folder.c_str(), W_OK) == 0, "cannot write the trace into '",
              folder.string(), "' (", std::strerror(errno),
              "); give --trace a file in a folder that exists and is writable");
}

void StepTrace::step_span(int tid, std::string name, int64_t step, int64_t begin_ns,
                          int64_t end_ns) {
  spans_.push_back({tid, std::move(name), begin_ns, end_ns, step, -1, {}});
}

void StepTrace::caller_span(std::string name, int64_t step, int64_t begin_ns, int64_t end_ns) {
  const std::lock_guard<std::mutex> lock(mutex_);
  step_span(kCallerTid, std::move(name), step, begin_ns, end_ns);
}

void StepTrace::device_thread_span(size_t device, std::string name, int64_t step,
                                   int64_t begin_ns, int64_t end_ns) {
  const std::lock_guard<std::mutex> lock(mutex_);
  step_span(device_thread_tid(device), std::move(name), step, begin_ns, end_ns);
}

void StepTrace::thread_span(const std::string& thread, std::string name, int64_t begin_ns,
                            int64_t end_ns) {
  if (written_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  if (written_) return;
  auto [it, added] = thread_tids_.try_emplace(
      thread, thread == kCallerThread ? kCallerTid
                                      : first_thread_tid() + static_cast<int>(thread_tids_.size()));
  thread_spans_.push_back({it->second, std::move(name), begin_ns, end_ns, -1, -1, {}});
  // Before the first traced step nothing is known to overlap it: the older half goes.
  if (spans_.empty() && thread_spans_.size() >= 2 * kHeldBefore) {
    thread_spans_.erase(thread_spans_.begin(),
                        thread_spans_.begin() + static_cast<std::ptrdiff_t>(kHeldBefore));
  }
}

void StepTrace::add_step(int64_t step, const std::vector<DeviceStep>& devices) {
  LS_ASSERT(devices.size() == devices_.size());
  std::unique_lock<std::mutex> lock(mutex_);
  for (size_t i = 0; i < devices.size(); ++i) {
    const int64_t offset = devices_[i].clock_offset_ns;
    const int64_t* t = devices[i].marks.ns;
    auto host = [offset](int64_t device_ns) { return device_ns + offset; };
    const int tid = compute_tid(i);
    step_span(tid, "input", step, host(t[kStepBegin]), host(t[kInputReady]));
    step_span(tid, "forward + backward", step, host(t[kInputReady]), host(t[kBackwardEnd]));
    step_span(tid, "waiting for gradient sums", step, host(t[kBackwardEnd]),
              host(t[kGradientsReduced]));
    step_span(tid, "loss + optimizer", step, host(t[kGradientsReduced]), host(t[kStepEnd]));
    add_layer_spans(tid, step, devices[i], host);
    // Buckets launched together share their marks: one span per launch.
    const std::vector<int64_t>& launch = devices[i].launch_ns;
    const size_t buckets = launch.size() / 2;
    for (size_t b = 0; b < buckets;) {
      size_t e = b + 1;
      int64_t bytes = devices_[i].bucket_bytes[b];
      while (e < buckets && launch[2 * e] == launch[2 * b] &&
             launch[2 * e + 1] == launch[2 * b + 1]) {
        bytes += devices_[i].bucket_bytes[e++];
      }
      const std::string which =
          e - b == 1 ? std::to_string(b) : std::to_string(b) + "-" + std::to_string(e - 1);
      Span span{comm_tid(i),
                (e - b == 1 ? "bucket " : "buckets ") + which + " all-reduce",
                host(launch[2 * b]),
                host(launch[2 * b + 1]),
                step,
                bytes,
                which};
      spans_.push_back(std::move(span));
      b = e;
    }
    counters_.push_back({tid, host(t[kStepEnd]),
                         static_cast<double>(devices[i].memory_in_use) / (1024.0 * 1024.0)});
  }
  lock.unlock();
  if (step >= options_.last_step) write();
}

template <typename ToHost>
void StepTrace::add_layer_spans(int tid, int64_t step, const DeviceStep& device, ToHost host) {
  if (!device.layer_points) return;
  // A begin opens a span and the end of the same layer closes it: layers nest, in forward and
  // (reversed) in backward. A stamp that does not pair (a model that ends a layer it did not
  // begin) is left out.
  const LayerStamps& points = *device.layer_points;
  const size_t n = std::min(points.size(), device.layer_ns.size());
  std::vector<size_t> open;
  for (size_t k = 0; k < n; ++k) {
    const LayerStamp& p = points[k];
    if (p.point == LayerPoint::kForwardBegin || p.point == LayerPoint::kBackwardBegin) {
      open.push_back(k);
      continue;
    }
    if (open.empty() || points[open.back()].layer != p.layer) continue;
    const bool forward = p.point == LayerPoint::kForwardEnd;
    step_span(tid, p.layer + (forward ? " forward" : " backward"), step,
              host(device.layer_ns[open.back()]), host(device.layer_ns[k]));
    open.pop_back();
  }
}

void StepTrace::add_pipeline_step(int64_t step, const std::vector<StageStep>& stages) {
  LS_ASSERT(stages.size() == devices_.size());
  std::unique_lock<std::mutex> lock(mutex_);
  for (size_t i = 0; i < stages.size(); ++i) {
    const int64_t offset = devices_[i].clock_offset_ns;
    auto host = [offset](int64_t device_ns) { return device_ns + offset; };
    const StageTimeline& t = stages[i].timeline;
    const int tid = compute_tid(i);
    step_span(tid, "input", step, host(t.begin_ns), host(t.input_ns));
    int64_t last_end = t.input_ns;
    for (const StageAction& a : t.actions) {
      step_span(tid,
                std::string(action_name(a.kind)) + " micro-batch " +
                    std::to_string(a.micro_batch),
                step, host(a.start_ns), host(a.end_ns));
      last_end = std::max(last_end, a.end_ns);
    }
    step_span(tid, "stage gradient sums", step, host(last_end), host(t.actions_end_ns));
    const OptimizerSpan& optimizer = stages[i].optimizer;
    step_span(tid, "optimizer", step, host(optimizer.begin_ns), host(optimizer.end_ns));
  }
  lock.unlock();
  if (step >= options_.last_step) write();
}

void StepTrace::finish() {
  bool traced_any;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    traced_any = !spans_.empty();
  }
  if (!written_ && traced_any) write();
}

void StepTrace::keep_thread_spans_in_window() {
  int64_t begin = std::numeric_limits<int64_t>::max(), end = std::numeric_limits<int64_t>::min();
  for (const Span& s : spans_) {
    begin = std::min(begin, s.begin_ns);
    end = std::max(end, s.end_ns);
  }
  for (Span& s : thread_spans_) {
    if (s.end_ns >= begin && s.begin_ns <= end) spans_.push_back(std::move(s));
  }
  thread_spans_.clear();
}

void StepTrace::write() {
  const std::lock_guard<std::mutex> lock(mutex_);
  written_ = true;
  keep_thread_spans_in_window();
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const Span& s : spans_) origin = std::min(origin, s.begin_ns);
  auto us = [origin](int64_t ns) { return static_cast<double>(ns - origin) * 1e-3; };
  // Every track's spans in time order, an enclosing span before those it holds (Perfetto does
  // not need it; readers of the file may).
  std::stable_sort(spans_.begin(), spans_.end(), [](const Span& a, const Span& b) {
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.begin_ns != b.begin_ns) return a.begin_ns < b.begin_ns;
    return a.end_ns > b.end_ns;
  });

  JsonWriter json;
  json.begin_object().key("traceEvents").begin_array();
  auto metadata = [&](const char* what, int tid, const std::string& name, int sort) {
    json.begin_object().field("ph", "M").field("name", what).field("pid", process_);
    if (tid >= 0) json.field("tid", tid);
    json.key("args").begin_object().field("name", name).end_object().end_object();
    if (tid >= 0) {
      json.begin_object()
          .field("ph", "M")
          .field("name", "thread_sort_index")
          .field("pid", process_)
          .field("tid", tid)
          .key("args")
          .begin_object()
          .field("sort_index", sort)
          .end_object()
          .end_object();
    }
  };
  metadata("process_name", -1, "lockstep process " + std::to_string(process_), 0);
  metadata("thread_name", kCallerTid, "caller thread (steps enqueued, results awaited)", 0);
  // Perfetto orders tracks by sort index: the caller, the application's threads, then per
  // device its compute stream, communication stream and host thread.
  for (const auto& [thread, tid] : thread_tids_) {
    if (tid != kCallerTid) metadata("thread_name", tid, thread, 1 + tid - first_thread_tid());
  }
  const int devices_sort = 1 + static_cast<int>(thread_tids_.size());
  for (size_t i = 0; i < devices_.size(); ++i) {
    const std::string who = devices_[i].device.str() + " (" + devices_[i].role + ")";
    metadata("thread_name", compute_tid(i), who + " compute stream", devices_sort + compute_tid(i));
    metadata("thread_name", comm_tid(i), who + " communication stream",
             devices_sort + comm_tid(i));
    metadata("thread_name", device_thread_tid(i), who + " host thread",
             devices_sort + device_thread_tid(i));
  }
  auto category = [this](const Span& s) {
    const bool device_stream =
        s.tid >= compute_tid(0) && s.tid < first_thread_tid() && s.tid % 3 != 0;  // not 12 + 3i
    if (!device_stream) return "host";
    return s.bytes >= 0 ? "communication" : "compute";
  };
  // Microseconds with 3 decimals: nanoseconds, however long the run.
  auto time_field = [&json](const char* name, double us) { json.key(name).value_fixed(us, 3); };
  for (const Span& s : spans_) {
    json.begin_object()
        .field("ph", "X")
        .field("name", s.name)
        .field("cat", category(s))
        .field("pid", process_)
        .field("tid", s.tid);
    time_field("ts", us(s.begin_ns));
    time_field("dur", std::max(0.0, static_cast<double>(s.end_ns - s.begin_ns) * 1e-3));
    json.key("args").begin_object();
    if (s.step >= 0) json.field("step", s.step);
    if (s.bytes >= 0) json.field("bytes", s.bytes).field("buckets", s.buckets);
    json.end_object().end_object();
  }
  for (const Counter& c : counters_) {
    const std::string device = devices_[device_of(c.tid)].device.str();
    json.begin_object()
        .field("ph", "C")
        .field("name", device + " memory in use")
        .field("pid", process_)
        .field("tid", c.tid);
    time_field("ts", us(c.at_ns));
    json.key("args").begin_object().field("MiB", c.mib).end_object().end_object();
  }
  json.end_array();
  json.field("displayTimeUnit", "ms");
  json.key("otherData")
      .begin_object()
      .field("producer", "lockstep")
      .field("format", "Chrome trace events; open in ui.perfetto.dev or chrome://tracing")
      .field("process", process_)
      .field("origin_ns", origin)  // the host's steady clock at ts 0 (scripts/merge-traces)
      .field("first_step", options_.first_step)
      .field("last_step", options_.last_step)
      .end_object();
  json.end_object();
  json.write_file(path_);
}

}  // namespace ls
