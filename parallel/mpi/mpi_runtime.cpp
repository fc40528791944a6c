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

// The failure-notice channel (see mpi_runtime.h): its own communicator, one receive posted from
// any process, and the notices this process sent (their buffers live until finalize()).
constexpr int kNoticeTag = 1;
constexpr size_t kNoticeBytes = 16384;
struct NoticeChannel {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request receive = MPI_REQUEST_NULL;
  std::vector<char> inbox = std::vector<char>(kNoticeBytes);
  std::optional<FailureNotice> received;
  bool posted = false;
  std::vector<char> outbox;
  std::vector<MPI_Request> sends;
};
NoticeChannel& channel() {
  static NoticeChannel c;
  return c;
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
  NoticeChannel& c = channel();
  check(MPI_Comm_dup(MPI_COMM_WORLD, &c.comm), "MPI_Comm_dup (failure notices)");
  check(MPI_Comm_set_errhandler(c.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Irecv(c.inbox.data(), static_cast<int>(c.inbox.size()), MPI_CHAR, MPI_ANY_SOURCE,
                  kNoticeTag, c.comm, &c.receive),
        "MPI_Irecv (failure notices)");
  return launch;
}

namespace {

// Tests the notice receive; caller holds mpi_mutex().
void test_notice_locked() {
  NoticeChannel& c = channel();
  if (c.received || c.receive == MPI_REQUEST_NULL) return;
  int done = 0;
  MPI_Status status;
  check(MPI_Test(&c.receive, &done, &status), "MPI_Test (failure notice)");
  if (!done) return;
  int bytes = 0;
  MPI_Get_count(&status, MPI_CHAR, &bytes);
  FailureNotice notice;
  notice.process = status.MPI_SOURCE;
  int kind = 0;
  std::memcpy(&kind, c.inbox.data(), sizeof(kind));
  notice.kind = static_cast<ErrorKind>(kind);
  notice.message.assign(c.inbox.data() + sizeof(kind),
                        static_cast<size_t>(std::max(bytes, 4)) - sizeof(kind));
  c.received = std::move(notice);
}

bool notice_arrived() {
  std::lock_guard lock(mpi_mutex());
  test_notice_locked();
  return channel().received.has_value();
}

// Waits for `request` until `timeout` or a failure notice; throws naming `what` if it did not
// complete (the request is then left to MPI_Finalize: a collective cannot be cancelled).
void wait_or_throw(MPI_Request& request, std::chrono::milliseconds timeout, const char* what) {
  const WaitEnd end = wait_all(&request, 1, Clock::now() + timeout, notice_arrived);
  if (end == WaitEnd::kDone) return;
  if (end == WaitEnd::kStopped) {
    const FailureNotice notice = *failure_notice();
    LS_THROW_AS(notice.kind, what, " stopped: process ", notice.process,
                " failed: ", notice.message);
  }
  LS_THROW_AS(ErrorKind::kTimeout, what, ": the processes did not all take part within ",
              timeout.count(),
              " ms (a process that died, was stopped, or no longer makes the same calls)");
}

int world_size_locked() {
  int size = 1;
  check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  return size;
}

int checked_count(size_t count, const char* what) {
  LS_CHECK(count <= static_cast<size_t>(INT_MAX), what, ": ", count,
           " values in one MPI message is more than MPI's int count allows (", INT_MAX, ")");
  return static_cast<int>(count);
}

}  // namespace

std::vector<int> allgather_int(int value, std::chrono::milliseconds timeout, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> all;
  {
    std::lock_guard lock(mpi_mutex());
    all.resize(static_cast<size_t>(world_size_locked()));
    check(MPI_Iallgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
  }
  wait_or_throw(request, timeout, what);
  return all;
}

std::vector<double> allgather_doubles(std::span<const double> mine,
                                      std::chrono::milliseconds timeout, const char* what) {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<double> all;
  const int count = checked_count(mine.size(), what);
  {
    std::lock_guard lock(mpi_mutex());
    all.resize(mine.size() * static_cast<size_t>(world_size_locked()));
    check(MPI_Iallgather(mine.data(), count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE,
                         MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
  }
  wait_or_throw(request, timeout, what);
  return all;
}

std::vector<std::vector<float>> gather_floats(std::span<const float> mine, int root,
                                              std::chrono::milliseconds timeout, const char* what) {
  const std::vector<int> counts = allgather_int(checked_count(mine.size(), what), timeout, what);
  int rank = 0;
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  }
  std::vector<float> all;
  std::vector<int> displacements;
  size_t total = 0;
  for (int count : counts) {
    displacements.push_back(checked_count(total, what));
    total += static_cast<size_t>(count);
  }
  if (rank == root) all.resize(total);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Igatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(),
                       counts.data(), displacements.data(), MPI_FLOAT, root, MPI_COMM_WORLD,
                       &request),
          "MPI_Igatherv");
  }
  wait_or_throw(request, timeout, what);
  std::vector<std::vector<float>> out;
  if (rank != root) return out;
  for (size_t p = 0; p < counts.size(); ++p) {
    const auto begin = all.begin() + displacements[p];
    out.emplace_back(begin, begin + counts[p]);
  }
  return out;
}

std::string broadcast_string(const std::string& text, int root, std::chrono::milliseconds timeout,
                             const char* what) {
  int length = checked_count(text.size(), what);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Ibcast(&length, 1, MPI_INT, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  }
  wait_or_throw(request, timeout, what);
  std::string out = text;
  out.resize(static_cast<size_t>(length));
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Ibcast(out.data(), length, MPI_CHAR, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  }
  wait_or_throw(request, timeout, what);
  return out;
}

void post_failure(ErrorKind kind, const std::string& message) {
  std::lock_guard lock(mpi_mutex());
  NoticeChannel& c = channel();
  if (c.posted || c.comm == MPI_COMM_NULL) return;
  c.posted = true;
  const int kind_value = static_cast<int>(kind);
  const size_t length = std::min(message.size(), kNoticeBytes - sizeof(kind_value));
  c.outbox.resize(sizeof(kind_value) + length);
  std::memcpy(c.outbox.data(), &kind_value, sizeof(kind_value));
  std::memcpy(c.outbox.data() + sizeof(kind_value), message.data(), length);
  int rank = 0;
  MPI_Comm_rank(c.comm, &rank);
  const int size = world_size_locked();
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    // Best effort: a process that is gone must not turn this failure into another one.
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(c.outbox.data(), static_cast<int>(c.outbox.size()), MPI_CHAR, p, kNoticeTag,
                  c.comm, &request) == MPI_SUCCESS) {
      c.sends.push_back(request);
    }
  }
}

std::optional<FailureNotice> failure_notice() {
  std::lock_guard lock(mpi_mutex());
  test_notice_locked();
  return channel().received;
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
  if (!initialized || finalized()) return;
  // The notice channel: the receive is cancelled; sends that could not complete (their process
  // is gone) are given up after a short bounded wait rather than blocking the exit.
  NoticeChannel& c = channel();
  if (c.receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&c.receive);
    MPI_Wait(&c.receive, MPI_STATUS_IGNORE);
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
  for (MPI_Request& send : c.sends) {
    int done = 0;
    while (MPI_Test(&send, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!done && send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  }
  c.sends.clear();
  if (c.comm != MPI_COMM_NULL) MPI_Comm_free(&c.comm);
  check(MPI_Finalize(), "MPI_Finalize");
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
