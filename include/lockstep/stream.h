// Streams and events with CUDA's semantics on every backend.
//
// A Stream runs the work enqueued on it in order, asynchronously: enqueueing returns at once.
// An Event recorded on a stream completes when all work enqueued before the record has run;
// Stream::wait(event) makes all later work on that stream wait for it. An event that was never
// recorded counts as complete (as in CUDA).
// Errors raised by a stream's work are kept and re-thrown, once, by the next synchronize() or
// check(); later work on that stream is skipped until then, and events recorded after the error
// carry it to the streams that wait on them. Every blocking wait is bounded by abort(): once a
// stream is aborted, its pending and future work is skipped and waits end with an error.
// Thread-safety: a Stream may be used from one thread at a time; Events may be queried anywhere.
#pragma once

#include <chrono>
#include <memory>

#include <lockstep/device.h>

namespace ls {

class Event;

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;

  virtual void record(Event& event) = 0;
  virtual void wait(const Event& event) = 0;
  // Blocks until all enqueued work has run; re-throws the first error it raised.
  virtual void synchronize() = 0;
  // Re-throws a pending error without waiting.
  virtual void check() = 0;
  // Skips all pending and future work; blocked waits on this stream end with an error.
  virtual void abort() = 0;
};

class Event {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Event() = default;
  virtual Device device() const = 0;
  // True when the work before the last record() has run (or nothing was recorded).
  virtual bool query() const = 0;
  // Blocks until query() is true; re-throws the error the recorded work raised, if any.
  virtual void synchronize() const = 0;
  // Milliseconds between two completed events of the same device.
  virtual double elapsed_ms_since(const Event& start) const = 0;
};

}  // namespace ls
