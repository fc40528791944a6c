// WorkerThread (see parallel/runtime/worker_thread.h).
#include "parallel/runtime/worker_thread.h"

#include <lockstep/error.h>

namespace ls {

WorkerThread::WorkerThread(std::string context)
    : context_(std::move(context)), thread_([this] { loop(); }) {}

WorkerThread::~WorkerThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::exception_ptr WorkerThread::wait_all(std::vector<std::future<void>>& futures) {
  std::exception_ptr first;
  for (auto& f : futures) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  return first;
}

std::vector<std::future<void>> WorkerThread::post_each(
    const std::vector<std::unique_ptr<WorkerThread>>& threads,
    const std::function<void(size_t)>& job) {
  std::vector<std::future<void>> futures;
  for (size_t i = 0; i < threads.size(); ++i)
    futures.push_back(threads[i]->post([&job, i] { job(i); }));
  return futures;
}

std::exception_ptr WorkerThread::run_each(const std::vector<std::unique_ptr<WorkerThread>>& threads,
                                          const std::function<void(size_t)>& job) {
  std::vector<std::future<void>> futures = post_each(threads, job);
  return wait_all(futures);
}

std::future<void> WorkerThread::post(std::function<void()> job) {
  std::packaged_task<void()> task(std::move(job));
  std::future<void> done = task.get_future();
  {
    std::lock_guard lock(mutex_);
    LS_ASSERT(!stopping_, "post to a stopping worker thread");
    jobs_.push_back(std::move(task));
  }
  cv_.notify_one();
  return done;
}

void WorkerThread::loop() {
  set_thread_error_context(context_);
  while (true) {
    std::packaged_task<void()> job;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // a packaged_task stores the exception in its future
  }
}

}  // namespace ls
