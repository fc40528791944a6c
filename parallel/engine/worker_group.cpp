#include "parallel/engine/worker_group.h"

#include <atomic>
#include <mutex>

#include <lockstep/error.h>
#include "parallel/runtime/step_common.h"

namespace ls {

WorkerGroup::WorkerGroup(const World* world, std::vector<std::string> names,
                         WorkerGroupOptions options)
    : names_(std::move(names)), options_(std::move(options)) {
  LS_CHECK(options_.monitor.telemetry_interval.count() > 0,
           "telemetry_interval must be positive, got ",
           options_.monitor.telemetry_interval.count(), " ms");
  processes_ = std::make_unique<ProcessGroup>(world, options_.timeout, failure_);
  for (const std::string& name : names_) threads_.push_back(std::make_unique<WorkerThread>(name));
  members_.resize(names_.size());
}

WorkerGroup::~WorkerGroup() {
  telemetry_.reset();  // its last sample reads the members' allocators
  destroy();
}

void WorkerGroup::destroy() {
  WorkerThread::run_each(threads_, [this](size_t i) { members_[i].reset(); });
}

void WorkerGroup::build(const std::function<std::unique_ptr<GroupMember>(size_t)>& make) {
  const std::exception_ptr first = run_each([&](size_t i) { members_[i] = make(i); });
  if (!first) return;
  // The members made are destroyed on their own threads (not by ~vector on this one).
  abort_all();
  destroy();
  std::rethrow_exception(first);
}

void WorkerGroup::start_telemetry(const std::vector<Device>& devices) {
  const std::string& path = options_.monitor.telemetry_path;
  if (path.empty()) return;
  const int process = processes_->rank();
  telemetry_ = std::make_unique<TelemetryRecorder>(
      process > 0 ? path + ".process-" + std::to_string(process) : path,
      options_.monitor.telemetry_interval, devices);
}

void WorkerGroup::set_telemetry_step(int64_t step) {
  if (telemetry_) telemetry_->set_step(step);
}

void WorkerGroup::abort_all() {
  for (auto& member : members_) {
    if (member) member->abort();
  }
}

void WorkerGroup::drain_all() {
  run_each([this](size_t i) { members_[i]->drain(); });
}

void WorkerGroup::check_usable(const char* what) const {
  LS_CHECK(!failure_.failed(), "cannot ", what, ": a ", options_.member_noun,
           " failed earlier (", failure_.message, "); destroy this ", options_.strategy,
           " and build a new one");
}

void WorkerGroup::run_on_all(const std::function<void(size_t)>& job, const char* what,
                             int64_t step, StallDetector& stalls) {
  check_usable(what);
  struct Failure {
    int member = -1;
    std::exception_ptr error;
    std::string position;
  };
  std::mutex mutex;
  Failure first;
  std::atomic<bool> failed{false};
  std::vector<std::future<void>> jobs;
  for (size_t i = 0; i < threads_.size(); ++i) {
    jobs.push_back(threads_[i]->post([&, i] {
      try {
        job(i);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (first.member < 0) {
          first = {static_cast<int>(i), std::current_exception(), members_[i]->position()};
        }
        failed = true;
      }
    }));
  }
  const std::string stuck = watch(jobs, failed, what, step, stalls);
  if (!failed && stuck.empty()) return;
  // A failed job may have left work on its streams that reads the caller's memory (the batch
  // being uploaded): let every stream finish or skip it before the caller gets control back.
  drain_all();
  // Another process failed first: every process ends with that process's error, word for
  // word (this process's members then only saw their waits aborted).
  processes_->raise_notice_if_any();
  const std::string prefix = processes_->prefix();
  if (!stuck.empty()) {
    processes_->fail(ErrorKind::kTimeout,
                     prefix + what + " " + std::to_string(step) + ": " + stuck);
  }
  processes_->fail(error_kind_of(first.error),
                   prefix + names_[static_cast<size_t>(first.member)] + " failed in " + what +
                       " (step " + std::to_string(step) + ", " + first.position +
                       "): " + describe_exception(first.error));
}

std::string WorkerGroup::watch(std::vector<std::future<void>>& jobs,
                               const std::atomic<bool>& failed, const char* what, int64_t step,
                               StallDetector& stalls) {
  using Clock = StallDetector::Clock;
  constexpr auto kPoll = std::chrono::milliseconds(5);
  const auto period = stalls.period();
  const MonitorOptions& monitor = options_.monitor;
  const bool beating = monitor.heartbeat && monitor.heartbeat_interval.count() > 0;
  std::string stuck;
  bool aborted = false;
  Clock::time_point next_check = Clock::now() + period;
  Clock::time_point next_beat = Clock::now() + monitor.heartbeat_interval;
  for (auto& job : jobs) {
    while (job.wait_for(kPoll) != std::future_status::ready) {
      if (aborted) continue;
      // A failure here or in another process: end every member now, not at a timeout.
      if (failed || (several_processes() && processes_->notice())) {
        abort_all();
        aborted = true;
        continue;
      }
      const Clock::time_point now = Clock::now();
      const bool beat = beating && now >= next_beat;
      if (now < next_check && !beat) continue;
      // Nothing may leave this loop while jobs still run: they reference the caller's frame.
      try {
        if (beat) {
          monitor.heartbeat("heartbeat: " + std::string(what) + " " + std::to_string(step) +
                            ": " + stalls.describe(now));
          next_beat = now + monitor.heartbeat_interval;
        }
        if (now >= next_check) {
          if (std::optional<std::string> report = stalls.check(now)) {
            stuck = *report;
            if (telemetry_) stuck += "; " + telemetry_->last_samples();
            abort_all();
            aborted = true;
          }
          next_check = now + period;
        }
      } catch (...) {
        stuck = "watching the " + options_.member_noun +
                "s failed: " + describe_exception(std::current_exception());
        abort_all();
        aborted = true;
      }
    }
  }
  if ((failed || !stuck.empty()) && !aborted) abort_all();
  return stuck;
}

}  // namespace ls
