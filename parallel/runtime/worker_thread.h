// WorkerThread: a long-lived thread that runs posted jobs in order and hands back futures.
// Each replica lives on one, so all of a device's state is made and used by the same thread
// (what CUDA and NCCL require: the current device and NCCL's group state are per thread).
// The destructor finishes the jobs already posted, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ls {

class WorkerThread {
 public:
  explicit WorkerThread(std::string context);
  ~WorkerThread();
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Runs `job` on the thread; the future holds its exception, if it throws.
  std::future<void> post(std::function<void()> job);
  // Waits for every future and returns the first exception among them (in order), or null.
  static std::exception_ptr wait_all(std::vector<std::future<void>>& futures);
  // Posts job(i) to threads[i] for every thread; returns their futures, in order.
  static std::vector<std::future<void>> post_each(
      const std::vector<std::unique_ptr<WorkerThread>>& threads,
      const std::function<void(size_t)>& job);
  // post_each, then wait_all.
  static std::exception_ptr run_each(const std::vector<std::unique_ptr<WorkerThread>>& threads,
                                     const std::function<void(size_t)>& job);

 private:
  void loop();
  std::string context_;  // the thread's ls::Error context, e.g. "replica 1 on host:1"
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ls
