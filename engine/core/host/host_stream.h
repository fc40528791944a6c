// The host backend's Stream and Event: a worker thread per stream with an in-order queue, and
// events that complete when the worker reaches their record. See lockstep/stream.h for the
// semantics they reproduce; this header is internal to engine/core/host/.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/core/host/host_graph.h"
#include <lockstep/stream.h>

namespace ls {

// Shared between a HostEvent and the record tasks in flight, so a record outlives nothing.
struct HostEventState {
  mutable std::mutex mutex;
  mutable std::condition_variable completed_cv;
  uint64_t recorded = 0;   // generation of the last record() call
  uint64_t completed = 0;  // generation the stream has reached
  Event::Clock::time_point time{};
  std::exception_ptr error;  // the recording stream's pending error at that point, if any
};

class HostEvent final : public Event {
 public:
  explicit HostEvent(Device device) : device_(device), state_(std::make_shared<HostEventState>()) {}
  Device device() const override { return device_; }
  bool query() const override;
  void synchronize() const override;
  double elapsed_ms_since(const Event& start) const override;
  const std::shared_ptr<HostEventState>& state() const { return state_; }

 private:
  Device device_;
  std::shared_ptr<HostEventState> state_;
};

class HostStream final : public Stream {
 public:
  HostStream(Device device, tbb::task_arena* arena, int threads);
  ~HostStream() override;  // runs (or, after abort, skips) what is queued, then joins

  Device device() const override { return device_; }
  void record(Event& event) override;
  void wait(const Event& event) override;
  void synchronize() override;
  void check() override;
  void abort() override;

  // always_run work runs even after an error or abort (event records, so waiters never hang).
  void enqueue(std::function<void()> work, bool always_run = false);

  // Graph capture (host_graph.h): while `capture` is set, enqueue/record/wait append nodes to it
  // instead of queueing work; synchronize() is an error. Set and cleared by the runtime.
  void set_capture(HostCapture* capture) { capture_ = capture; }
  HostCapture* capture() const { return capture_; }

 private:
  struct Task {
    std::function<void()> work;
    bool always_run;
  };
  void worker_loop();
  void rethrow_pending_locked(std::unique_lock<std::mutex>& lock);

  Device device_;
  tbb::task_arena* arena_;
  int threads_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  bool aborted_ = false;
  std::exception_ptr error_;  // first error since the last synchronize()/check()
  HostCapture* capture_ = nullptr;  // owner thread only
  std::thread worker_;
};

}  // namespace ls
