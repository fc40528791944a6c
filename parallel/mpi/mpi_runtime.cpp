// The MPI runtime of a World (see parallel/mpi/mpi_runtime.h) and bounded request waits
// (parallel/mpi/mpi_wait.h). MPI_COMM_WORLD's error handler is set to MPI_ERRORS_RETURN so a
// failed call becomes an ls::Error instead of killing the job.
#include "parallel/mpi/mpi_runtime.h"

#include <mpi.h>

#include <mutex>
#include <thread>

#include "engine/core/error.h"
#include "parallel/mpi/mpi_wait.h"

namespace ls::mpi {
namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

}  // namespace

bool built_with_mpi() { return true; }

std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  LS_THROW_AS(ErrorKind::kInternal, what, " failed: ", text);
}

Launch init() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    // The collectives' MPI calls come from a stream worker thread, World's from the caller's:
    // different threads, one at a time (mpi_mutex), which needs at least SERIALIZED.
    int provided = MPI_THREAD_SINGLE;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    LS_CHECK(provided >= MPI_THREAD_SERIALIZED, "this MPI library provides only ",
             thread_level_name(provided),
             "; lockstep calls MPI from its stream threads and needs "
             "MPI_THREAD_SERIALIZED or better (Open MPI from Debian provides MULTIPLE)");
  }
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  Launch launch;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &launch.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &launch.size), "MPI_Comm_size");
  return launch;
}

std::vector<int> allgather_int(int value, std::chrono::milliseconds timeout) {
  int size = 1;
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> all;
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
    all.resize(static_cast<size_t>(size));
    check(MPI_Iallgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
  }
  const WaitEnd end = wait_all(&request, 1, Clock::now() + timeout, [] { return false; });
  LS_CHECK_AS(ErrorKind::kTimeout, end == WaitEnd::kDone,
              "World::init(): the processes did not all exchange their device counts within ",
              timeout.count(),
              " ms; every process started by mpirun must call World::init(), "
              "or raise WorldOptions::timeout if some start slowly");
  return all;
}

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

void finalize() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !finalized()) check(MPI_Finalize(), "MPI_Finalize");
}

WaitEnd wait_all(MPI_Request* requests, int count, Clock::time_point deadline,
                 const std::function<bool()>& stop) {
  for (int polls = 0;; ++polls) {
    int done = 0;
    {
      std::lock_guard lock(mpi_mutex());
      check(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    }
    if (done) return WaitEnd::kDone;
    if (stop()) return WaitEnd::kStopped;
    if (Clock::now() >= deadline) return WaitEnd::kTimeout;
    // Spin briefly (a collective's peers are usually microseconds away), then back off.
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace ls::mpi
