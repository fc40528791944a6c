// The process-wide MPI state World needs, behind an interface that compiles without MPI:
// parallel/mpi/mpi_runtime.cpp implements it with MPI, parallel/mpi/without_mpi.cpp (built when
// CMake finds no MPI) gives a single-process world and clear errors for anything more.
// Every MPI call lockstep makes holds mpi_mutex(), so MPI_THREAD_SERIALIZED would do; init
// requests MPI_THREAD_MULTIPLE so that the application may call MPI from its own threads too.
// Thread-safety: init/finalize from one thread; mpi_mutex() serialises the rest.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "parallel/comm/communicator.h"
#include <lockstep/world.h>

namespace ls::mpi {

bool built_with_mpi();
struct Launch {
  int rank = 0;
  int size = 1;
};
// MPI_Init_thread (once per process) and this process's rank and size in MPI_COMM_WORLD.
Launch init();
// Exchanges between the processes for World, DataParallel and Pipeline (not the replicas'
// collectives, which are Communicators), on a communicator of their own
// (parallel/mpi/process_exchange.cpp). Every process calls each, in the same order, with the
// same `what`: each starts by comparing a hash of `what` across the processes, so processes at
// different exchanges get a `desync` error naming this one instead of mismatched data. Each step
// is non-blocking MPI polled until `timeout` or a failure notice on `notices` (below); either
// ends it with an ls::Error (kind timeout naming `what`, or the notice's kind and message). An
// exchange given up on cannot be cancelled: its buffers are kept until finalize() and every
// later exchange fails at once (kind aborted), since the processes are then out of step. With
// one process (MPI not started) each returns the caller's own values.
// Every process's `value`, in process order.
class FailureChannel;
std::vector<int> allgather_int(int value, std::chrono::milliseconds timeout,
                               const char* what = "World::init(): the device-count exchange",
                               FailureChannel* notices = nullptr);
// Every process's values (the same count on each), in process order.
std::vector<double> allgather_doubles(std::span<const double> mine,
                                      std::chrono::milliseconds timeout, const char* what,
                                      FailureChannel* notices = nullptr);
// Every process's floats (any count each) on `root`, in process order; empty on the others.
std::vector<std::vector<float>> gather_floats(std::span<const float> mine, int root,
                                              std::chrono::milliseconds timeout, const char* what,
                                              FailureChannel* notices = nullptr);
// Every process's text (any length each), in process order.
std::vector<std::string> allgather_string(const std::string& text,
                                          std::chrono::milliseconds timeout, const char* what,
                                          FailureChannel* notices = nullptr);
// `text` as `root` passed it, on every process (the others' `text` is ignored).
std::string broadcast_string(const std::string& text, int root, std::chrono::milliseconds timeout,
                             const char* what, FailureChannel* notices = nullptr);

// Failure notices: how one process's failure reaches every other process at once, instead of
// at their next collective's timeout. One FailureChannel per run (a DataParallel): every process
// makes its channels in the same order, and channel k uses MPI tag k on a communicator of its
// own (MPI_Comm_dup of MPI_COMM_WORLD, made by init()), so a notice never reaches a later run.
// post() sends the error to every other process without waiting (once: later posts do nothing);
// notice() tests for one (non-blocking) and returns the first that arrived, every time after.
// With one process (or without MPI) both do nothing.
struct FailureNotice {
  int process = 0;
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
};
class FailureChannel {
 public:
  FailureChannel();
  ~FailureChannel();  // cancels the receive; gives up sends still pending after 100 ms
  FailureChannel(const FailureChannel&) = delete;
  FailureChannel& operator=(const FailureChannel&) = delete;
  void post(ErrorKind kind, const std::string& message);
  std::optional<FailureNotice> notice() noexcept;

 private:
  struct State;  // MPI requests and buffers (mpi_runtime.cpp)
  std::unique_ptr<State> state_;
};
bool finalized();
void finalize();  // MPI_Finalize; a no-op when MPI was never started or is finalized
void abort(int exit_code);  // MPI_Abort on MPI_COMM_WORLD; returns only if MPI is not running
std::mutex& mpi_mutex();

}  // namespace ls::mpi

namespace ls {
// Communicators over the host devices of every process of `world` (world.size() > 1):
// parallel/mpi/mpi_host_communicator.h. Collective over the processes: every process calls it.
std::vector<std::unique_ptr<Communicator>> make_mpi_host_communicators(
    const World& world, const CommunicatorOptions& options);
}  // namespace ls
