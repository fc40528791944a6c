// The MPI runtime of a World (see parallel/mpi/mpi_runtime.h) and bounded request waits
// (parallel/mpi/mpi_wait.h). MPI_COMM_WORLD's error handler is set to MPI_ERRORS_RETURN so a
// failed call becomes an ls::Error instead of killing the job.
#include "parallel/mpi/mpi_runtime.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <lockstep/error.h>
#include "parallel/mpi/mpi_state.h"
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

constexpr size_t kNoticeBytes = 16384;

}  // namespace

bool built_with_mpi() { return true; }

State& state() {
  static State s;
  return s;
}

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
  // Failure notices and the exchanges between processes each get a communicator of their own,
  // so neither can match the other's messages or the application's.
  for (MPI_Comm* comm : {&state().notices, &state().exchanges}) {
    check(MPI_Comm_dup(MPI_COMM_WORLD, comm), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  return launch;
}

struct FailureChannel::State {
  int tag = 0;
  int rank = 0;
  int size = 1;
  MPI_Request receive = MPI_REQUEST_NULL;
  std::vector<char> inbox = std::vector<char>(kNoticeBytes);
  std::optional<FailureNotice> received;
  bool posted = false;
  std::vector<char> outbox;
  std::vector<MPI_Request> sends;
};

FailureChannel::FailureChannel() {
  std::lock_guard lock(mpi_mutex());
  if (state().notices == MPI_COMM_NULL) return;  // MPI was not started: one process
  state_ = std::make_unique<State>();
  State& s = *state_;
  s.tag = state().next_notice_tag;
  state().next_notice_tag = s.tag % 30000 + 1;  // MPI guarantees tags up to 32767
  check(MPI_Comm_rank(state().notices, &s.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(state().notices, &s.size), "MPI_Comm_size");
  check(MPI_Irecv(s.inbox.data(), static_cast<int>(s.inbox.size()), MPI_CHAR, MPI_ANY_SOURCE, s.tag,
                  state().notices, &s.receive),
        "MPI_Irecv (failure notices)");
}

FailureChannel::~FailureChannel() {
  if (!state_) return;
  std::lock_guard lock(mpi_mutex());
  State& s = *state_;
  // Bounded, like every wait: the receive is cancelled, and a send to a process that is gone
  // may never complete. Whatever is still pending after 100 ms keeps its buffers (the State)
  // in the graveyard until MPI_Finalize.
  if (s.receive != MPI_REQUEST_NULL) MPI_Cancel(&s.receive);
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(100);
  bool pending = false;
  for (MPI_Request* request : [&] {
         std::vector<MPI_Request*> all{&s.receive};
         for (MPI_Request& send : s.sends) all.push_back(&send);
         return all;
       }()) {
    int done = *request == MPI_REQUEST_NULL ? 1 : 0;
    while (!done && MPI_Test(request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
           Clock::now() < deadline) {
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    pending = pending || !done;
  }
  if (pending) bury(std::shared_ptr<State>(std::move(state_)));
}

void FailureChannel::post(ErrorKind kind, const std::string& message) {
  if (!state_) return;
  std::lock_guard lock(mpi_mutex());
  State& s = *state_;
  if (s.posted) return;
  s.posted = true;
  const int kind_value = static_cast<int>(kind);
  const size_t length = std::min(message.size(), kNoticeBytes - sizeof(kind_value));
  s.outbox.resize(sizeof(kind_value) + length);
  std::memcpy(s.outbox.data(), &kind_value, sizeof(kind_value));
  std::memcpy(s.outbox.data() + sizeof(kind_value), message.data(), length);
  for (int p = 0; p < s.size; ++p) {
    if (p == s.rank) continue;
    // Best effort: a process that is gone must not turn this failure into another one.
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(s.outbox.data(), static_cast<int>(s.outbox.size()), MPI_CHAR, p, s.tag,
                  state().notices, &request) == MPI_SUCCESS) {
      s.sends.push_back(request);
    }
  }
}

std::optional<FailureNotice> FailureChannel::notice() noexcept {
  if (!state_) return std::nullopt;
  std::lock_guard lock(mpi_mutex());
  State& s = *state_;
  if (s.received || s.receive == MPI_REQUEST_NULL) return s.received;
  int done = 0;
  MPI_Status status;
  // Called from the runs' watch loops, which must not be left by an exception: a failing test
  // is itself the notice that ends the run.
  if (const int rc = MPI_Test(&s.receive, &done, &status); rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(rc, text, &length);
    s.received =
        FailureNotice{-1, ErrorKind::kInternal,
                      std::string("MPI_Test on the failure-notice channel failed: ") + text};
    return s.received;
  }
  if (!done) return std::nullopt;
  int bytes = 0;
  MPI_Get_count(&status, MPI_CHAR, &bytes);
  FailureNotice notice;
  notice.process = status.MPI_SOURCE;
  int kind = 0;
  std::memcpy(&kind, s.inbox.data(), sizeof(kind));
  notice.kind = static_cast<ErrorKind>(kind);
  if (bytes > static_cast<int>(sizeof(kind))) {
    notice.message.assign(s.inbox.data() + sizeof(kind), static_cast<size_t>(bytes) - sizeof(kind));
  }
  s.received = std::move(notice);
  return s.received;
}

namespace {
bool finalized_locked() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}
}  // namespace

bool finalized() {
  std::lock_guard lock(mpi_mutex());
  return finalized_locked();
}

void finalize() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || finalized_locked()) return;
  // Notices nobody received (their run ended first) are dropped with their communicator; a
  // poisoned exchanges communicator is left to MPI_Finalize with its abandoned requests.
  if (state().notices != MPI_COMM_NULL) MPI_Comm_free(&state().notices);
  if (state().exchanges != MPI_COMM_NULL && state().poisoned.empty()) {
    MPI_Comm_free(&state().exchanges);
  }
  check(MPI_Finalize(), "MPI_Finalize");
  state().graveyard.clear();  // MPI writes nothing after MPI_Finalize
}

void abort(int exit_code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && !finalized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
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
    // Spin briefly (a collective's peers are usually microseconds away), then back off: 50 us
    // sleeps for about a second, then 2 ms, so a process that waits long (for process 0's
    // one-process run, a slow checkpoint) leaves the cores to the others.
    if (polls < 1000) {
      std::this_thread::yield();
    } else if (polls > 20000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace ls::mpi
