// lockstep-doctor's known-answer all-reduce: a thread per device, exactly as training runs
// collectives, with a bounded wait. Also the child-process runner the peer-to-peer checks use
// to repeat it under another NCCL environment (NCCL reads its environment once per process).
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/device.h>
#include "parallel/comm/communicator.h"
#include "tools/doctor/finding.h"

namespace ls::doctor {

// Element i of rank r holds (r + 1) + i % 7, so the sum over n ranks is exact in f32; any wrong
// element, error or a wait past `timeout` is a FAIL naming the devices. A rank stuck in the
// driver cannot be joined: on a hang the caller gets the FAIL and must exit the process soon
// (`hung` is set).
Finding known_answer_all_reduce(const std::vector<Device>& devices,
                                std::chrono::milliseconds timeout, bool* hung);

// The same over other communicators (the world's, world_checks.h): `make` returns one per device
// of `devices`, in order, and may take up to `make_limit`; rank() and size() may be global, the
// known answer follows them. The finding is named `check` / `subject`; `scope` follows "over N
// device(s)" in its detail.
struct KnownAnswerRun {
  std::function<std::vector<std::unique_ptr<Communicator>>()> make;
  std::chrono::milliseconds make_limit{};
  std::string check = "all-reduce";
  std::string subject;
  std::string scope;
};
Finding known_answer_all_reduce(const std::vector<Device>& devices, const KnownAnswerRun& run,
                                std::chrono::milliseconds timeout, bool* hung);

// Runs fn() on a detached thread and waits up to `limit`: its future when it has finished (get()
// returns the result or rethrows), nullopt when it has not. A thread stuck in the driver can be
// neither joined nor cancelled, so an unfinished one is left behind; its state lives until it
// ends. The doctor calls everything that may hang on a broken machine this way.
template <typename Fn>
auto run_abandonable(Fn fn, std::chrono::milliseconds limit)
    -> std::optional<std::future<decltype(fn())>> {
  auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
  std::future<decltype(fn())> result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (result.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return result;
}

struct ChildResult {
  int exit_code = -1;      // -1 when it was killed
  bool timed_out = false;  // killed after the time limit
  std::string output;      // stdout and stderr together
};

// Runs this program again (/proc/self/exe) with `args` and the extra environment `env`
// ("NAME=value"), waiting at most `limit`; a child past it is killed (SIGKILL).
ChildResult run_self(const std::vector<std::string>& args, const std::vector<std::string>& env,
                     std::chrono::milliseconds limit);

}  // namespace ls::doctor
