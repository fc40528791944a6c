// Host streams and events: one worker thread per stream runs its queue in order.
// Errors: the first exception a task throws becomes the stream's pending error; later tasks are
// skipped (their inputs may be garbage) until synchronize()/check() re-throws it. Event records
// always run, carrying the pending error to whoever waits on the event, so no waiter hangs.
#include "engine/core/host/host_stream.h"

#include <oneapi/tbb/parallel_for.h>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"

namespace ls {
namespace {

// How often a blocked wait looks at its stream's abort flag. Waits are woken at once by a
// completion; the slice only bounds how late an abort is noticed.
constexpr auto kAbortPollInterval = std::chrono::milliseconds(20);

// Set on each worker thread, read by host kernels through host_parallel_for.
thread_local tbb::task_arena* t_arena = nullptr;
thread_local int t_threads = 1;

}  // namespace

bool HostEvent::query() const {
  std::lock_guard lock(state_->mutex);
  return state_->completed >= state_->recorded;
}

void HostEvent::synchronize() const {
  std::unique_lock lock(state_->mutex);
  const uint64_t target = state_->recorded;
  state_->completed_cv.wait(lock, [&] { return state_->completed >= target; });
  if (state_->error) std::rethrow_exception(state_->error);
}

double HostEvent::elapsed_ms_since(const Event& start) const {
  auto* other = dynamic_cast<const HostEvent*>(&start);
  LS_CHECK(other != nullptr, "elapsed_ms_since: events of ", device_.str(), " and ",
           start.device().str(), " cannot be compared");
  LS_CHECK(query() && other->query(), "elapsed_ms_since: both events must have completed");
  std::scoped_lock lock(state_->mutex, other->state_->mutex);
  return std::chrono::duration<double, std::milli>(state_->time - other->state_->time).count();
}

HostStream::HostStream(Device device, tbb::task_arena* arena, int threads)
    : device_(device), arena_(arena), threads_(threads), worker_([this] { worker_loop(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

void HostStream::enqueue(std::function<void()> work, bool always_run) {
  if (capture_ != nullptr) {
    capture_->nodes.push_back({HostCapture::Kind::kWork, this, std::move(work), always_run});
    return;
  }
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(work), always_run});
  }
  work_cv_.notify_one();
}

void HostStream::worker_loop() {
  t_arena = arena_;
  t_threads = threads_;
  set_thread_error_context(device_.str() + " stream");
  std::unique_lock lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping and drained
    Task task = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = (error_ || aborted_) && !task.always_run;
    busy_ = true;
    lock.unlock();
    std::exception_ptr failure;
    if (!skip) {
      try {
        task.work();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    task.work = nullptr;  // release captured tensors before reporting idle
    lock.lock();
    busy_ = false;
    if (failure && !error_) error_ = failure;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void HostStream::record(Event& event) {
  auto* host_event = dynamic_cast<HostEvent*>(&event);
  LS_CHECK(host_event != nullptr && event.device() == device_, "record: the event belongs to ",
           event.device().str(), ", the stream to ", device_.str(),
           "; create the event with the stream's device runtime");
  if (capture_ != nullptr) {
    capture_->nodes.push_back({HostCapture::Kind::kRecord, this, nullptr, false, &event});
    return;
  }
  std::shared_ptr<HostEventState> state = host_event->state();
  uint64_t generation;
  {
    std::lock_guard lock(state->mutex);
    generation = ++state->recorded;
  }
  enqueue(
      [this, state, generation] {
        std::exception_ptr error;
        {
          std::lock_guard lock(mutex_);
          error = error_;
        }
        std::lock_guard lock(state->mutex);
        state->completed = std::max(state->completed, generation);
        state->time = Event::Clock::now();
        state->error = error;
        state->completed_cv.notify_all();
      },
      /*always_run=*/true);
}

void HostStream::wait(const Event& event) {
  auto* host_event = dynamic_cast<const HostEvent*>(&event);
  LS_CHECK(host_event != nullptr, "wait: a ", device_.str(), " stream cannot wait on an event of ",
           event.device().str(), "; host streams wait on host events");
  if (capture_ != nullptr) {
    capture_->nodes.push_back(
        {HostCapture::Kind::kWait, this, nullptr, false, const_cast<Event*>(&event)});
    return;
  }
  std::shared_ptr<HostEventState> state = host_event->state();
  uint64_t target;
  {
    std::lock_guard lock(state->mutex);
    target = state->recorded;
  }
  if (target == 0) return;  // never recorded: complete, as in CUDA
  enqueue([this, state, target] {
    std::unique_lock lock(state->mutex);
    while (!state->completed_cv.wait_for(lock, kAbortPollInterval,
                                         [&] { return state->completed >= target; })) {
      std::lock_guard stream_lock(mutex_);
      LS_CHECK(!aborted_, "stream of ", device_.str(), " aborted while waiting on an event");
    }
    if (state->error) std::rethrow_exception(state->error);  // errors flow across streams
  });
}

void HostStream::rethrow_pending_locked(std::unique_lock<std::mutex>& lock) {
  if (!error_) return;
  std::exception_ptr error = std::exchange(error_, nullptr);
  lock.unlock();
  std::rethrow_exception(error);
}

void HostStream::synchronize() {
  LS_CHECK(capture_ == nullptr, "synchronize: the stream of ", device_.str(),
           " is being captured into a graph; a captured step must not wait for the device");
  std::unique_lock lock(mutex_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  rethrow_pending_locked(lock);
}

void HostStream::check() {
  std::unique_lock lock(mutex_);
  rethrow_pending_locked(lock);
}

void HostStream::abort() {
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    if (!error_) {
      error_ = std::make_exception_ptr(
          Error("stream of " + device_.str() + " was aborted", __FILE__, __LINE__, "",
                ErrorKind::kAborted));
    }
  }
  work_cv_.notify_all();
}

// ---- host_device.h ----------------------------------------------------------------------

void host_enqueue(Stream& stream, std::function<void()> work) {
  auto* host_stream = dynamic_cast<HostStream*>(&stream);
  LS_CHECK(host_stream != nullptr, "a host kernel was given a stream of ",
           stream.device().str(), "; pass a stream of the host device that owns the tensors");
  host_stream->enqueue(std::move(work));
}

int host_current_threads() { return t_threads; }

void host_parallel_for(int64_t begin, int64_t end, int64_t grain,
                       const std::function<void(int64_t, int64_t)>& body) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  grain = std::max<int64_t>(grain, 1);
  if (t_arena == nullptr || t_threads <= 1 || n <= grain) {
    body(begin, end);
    return;
  }
  // Fixed chunks: a few per thread for balance, never smaller than the grain.
  const int64_t chunk = std::max(grain, (n + 4 * t_threads - 1) / (4 * t_threads));
  const int64_t chunks = (n + chunk - 1) / chunk;
  t_arena->execute([&] {
    tbb::parallel_for(int64_t{0}, chunks, [&](int64_t c) {
      body(begin + c * chunk, std::min(end, begin + (c + 1) * chunk));
    });
  });
}

}  // namespace ls
