// The known-answer all-reduce and the child-process runner (see allreduce_check.h).
#include "tools/doctor/allreduce_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "parallel/comm/communicator.h"

extern char** environ;

namespace ls::doctor {
namespace {

constexpr int64_t kKnownAnswerCount = (1 << 20) + 3;  // elements per rank

// One rank's part; returns the number of wrong elements.
int64_t known_answer_rank(Communicator& comm, Device device) {
  constexpr int64_t kCount = kKnownAnswerCount;
  DeviceRuntime& runtime = device_runtime(device);
  runtime.bind_current_thread();
  auto stream = runtime.create_stream();
  std::vector<float> host(kCount);
  for (int64_t i = 0; i < kCount; ++i)
    host[static_cast<size_t>(i)] = static_cast<float>(comm.rank() + 1 + i % 7);
  Tensor buffer = Tensor::from_host(host, {kCount}, device, *stream);
  comm.all_reduce(buffer.data(), buffer.data(), kCount, DType::kF32, ReduceOp::kSum, *stream);
  const std::vector<float> result = buffer.to_host_f32(*stream);
  const int64_t n = comm.size();
  int64_t wrong = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    wrong += result[static_cast<size_t>(i)] != static_cast<float>(n * (n + 1) / 2 + n * (i % 7));
  }
  return wrong;
}

// Waits up to `limit` for child `pid` to exit; true with its exit code (-1 if killed by a
// signal) when it did.
bool reap_within(pid_t pid, int* exit_code, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return true;
    }
    if (done < 0 && errno != EINTR) return true;  // not our child any more: nothing to wait for
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

Finding known_answer_all_reduce(const std::vector<Device>& devices,
                                std::chrono::milliseconds timeout, bool* hung) {
  CommunicatorOptions options;
  options.timeout = timeout;
  KnownAnswerRun run;
  run.make = [devices, options] { return make_communicators(devices, options); };
  // Creating them (NCCL's initialisation) can hang on a broken machine too: bounded as well.
  run.make_limit = timeout + std::chrono::seconds(5);
  run.subject = devices_str(devices);
  return known_answer_all_reduce(devices, run, timeout, hung);
}

Finding known_answer_all_reduce(const std::vector<Device>& devices, const KnownAnswerRun& run,
                                std::chrono::milliseconds timeout, bool* hung) {
  *hung = false;
  Finding f{run.check, run.subject, Verdict::kOk, "", ""};
  const std::string fix_p2p =
      devices[0].is_cuda()
          ? "see the p2p, acs and iommu findings; NCCL_P2P_DISABLE=1 works around a broken "
            "peer-to-peer path (docs/troubleshooting.md)"
          : "";
  auto fail = [&](const std::string& detail) {
    return Finding{run.check, run.subject, Verdict::kFail, detail, fix_p2p};
  };
  std::vector<std::unique_ptr<Communicator>> comms;
  auto made = run_abandonable(run.make, run.make_limit);
  if (!made) {
    *hung = true;
    return fail("hung creating the communicators (no result in " +
                std::to_string(run.make_limit.count()) + " ms)");
  }
  try {
    comms = made->get();
  } catch (const std::exception& e) {
    return fail(std::string("cannot create the communicators: ") + e.what());
  }
  auto ranks = std::make_shared<std::vector<std::future<int64_t>>>();
  for (size_t r = 0; r < devices.size(); ++r) {
    Communicator* comm = comms[r].get();
    const Device device = devices[r];
    ranks->push_back(std::async(std::launch::async,
                                [comm, device] { return known_answer_rank(*comm, device); }));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
  int64_t wrong = 0;
  std::string failure;
  for (size_t r = 0; r < ranks->size(); ++r) {
    if ((*ranks)[r].wait_until(deadline) != std::future_status::ready) {
      for (auto& c : comms) c->abort();
      *hung = true;
      const int rank = comms[r]->rank();
      // Deliberately leaked: a rank stuck in the driver can be neither joined (~future of
      // std::async joins) nor have its communicator freed under it. The caller exits soon.
      new std::shared_ptr<std::vector<std::future<int64_t>>>(ranks);
      new std::vector<std::unique_ptr<Communicator>>(std::move(comms));
      return fail("hung: rank " + std::to_string(rank) + " on " + devices[r].str() +
                  " did not finish in " + std::to_string(timeout.count()) + " ms");
    }
    try {
      wrong += (*ranks)[r].get();
    } catch (const std::exception& e) {
      if (failure.empty()) failure = e.what();
    }
  }
  if (!failure.empty()) return fail("failed: " + failure);
  if (wrong != 0) {
    return fail(std::to_string(wrong) + " wrong element(s) of " +
                std::to_string(kKnownAnswerCount * static_cast<int64_t>(devices.size())));
  }
  f.detail = "known-answer all-reduce over " + std::to_string(comms[0]->size()) + " device(s)" +
             run.scope + " (" + comms[0]->backend() + " backend): exact";
  return f;
}

ChildResult run_self(const std::vector<std::string>& args, const std::vector<std::string>& env,
                     std::chrono::milliseconds limit) {
  std::vector<std::string> argv_text{"/proc/self/exe"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = env;
  for (char** e = environ; *e; ++e) env_text.emplace_back(*e);  // later duplicates lose
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);

  int pipe_fds[2];
  LS_CHECK_IO(::pipe2(pipe_fds, O_CLOEXEC) == 0, "pipe: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    LS_THROW_IO("cannot run a child lockstep-doctor: ", std::strerror(rc));
  }
  ChildResult result;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool open = true;
  while (open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(pipe_fds[0], buf, sizeof buf);
    if (n > 0) result.output.append(buf, static_cast<size_t>(n));
    open = n > 0 || (n < 0 && errno == EINTR);
  }
  ::close(pipe_fds[0]);
  if (!result.timed_out) {
    // The output ended: the child is exiting. Give it until the limit like the rest.
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left > std::chrono::milliseconds(0)) {
      result.timed_out = !reap_within(pid, &result.exit_code,
                                      std::chrono::duration_cast<std::chrono::milliseconds>(left));
    } else {
      result.timed_out = true;
    }
    if (result.timed_out) ::kill(pid, SIGKILL);
  }
  if (result.timed_out) {
    // A child stuck in the driver (uninterruptible sleep) outlives even SIGKILL: wait a little,
    // then leave it rather than hang the doctor too.
    int ignored = 0;
    if (!reap_within(pid, &ignored, std::chrono::seconds(5))) {
      result.output += "\n(the child could not be killed: stuck in the driver)";
    }
    result.exit_code = -1;
  }
  return result;
}

}  // namespace ls::doctor
