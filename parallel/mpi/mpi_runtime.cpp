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

// The communicator every FailureChannel sends on (made by init(), freed by finalize()), and the
// tag of the next channel.
MPI_Comm g_notice_comm = MPI_COMM_NULL;
int g_next_notice_tag = 1;
constexpr size_t kNoticeBytes = 16384;

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
  check(MPI_Comm_dup(MPI_COMM_WORLD, &g_notice_comm), "MPI_Comm_dup (failure notices)");
  check(MPI_Comm_set_errhandler(g_notice_comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return launch;
}

namespace {

// Waits for `request` until `timeout` or a failure notice; throws naming `what` if it did not
// complete (the request is then left to MPI_Finalize: a collective cannot be cancelled).
void wait_or_throw(MPI_Request& request, std::chrono::milliseconds timeout, const char* what,
                   FailureChannel* notices) {
  const auto arrived = [notices] { return notices != nullptr && notices->notice().has_value(); };
  const WaitEnd end = wait_all(&request, 1, Clock::now() + timeout, arrived);
  if (end == WaitEnd::kDone) return;
  if (end == WaitEnd::kStopped) {
    const FailureNotice notice = *notices->notice();
    LS_THROW_AS(notice.kind, what, " stopped: process ", notice.process,
                " failed: ", notice.message);
  }
  LS_THROW_AS(ErrorKind::kTimeout, what, ": the processes did not all take part within ",
              timeout.count(),
              " ms (a process that died, was stopped, or no longer makes the same calls)");
}

// Whether this process runs under MPI (the process collectives are otherwise a world of one).
bool started() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
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

std::vector<int> allgather_int(int value, std::chrono::milliseconds timeout, const char* what,
                               FailureChannel* notices) {
  if (!started()) return {value};
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> all;
  {
    std::lock_guard lock(mpi_mutex());
    all.resize(static_cast<size_t>(world_size_locked()));
    check(MPI_Iallgather(&value, 1, MPI_INT, all.data(), 1, MPI_INT, MPI_COMM_WORLD, &request),
          "MPI_Iallgather");
  }
  wait_or_throw(request, timeout, what, notices);
  return all;
}

std::vector<double> allgather_doubles(std::span<const double> mine,
                                      std::chrono::milliseconds timeout, const char* what,
                                      FailureChannel* notices) {
  if (!started()) return {mine.begin(), mine.end()};
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
  wait_or_throw(request, timeout, what, notices);
  return all;
}

std::vector<std::vector<float>> gather_floats(std::span<const float> mine, int root,
                                              std::chrono::milliseconds timeout, const char* what,
                                              FailureChannel* notices) {
  if (!started()) return {std::vector<float>(mine.begin(), mine.end())};
  const std::vector<int> counts =
      allgather_int(checked_count(mine.size(), what), timeout, what, notices);
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
  wait_or_throw(request, timeout, what, notices);
  std::vector<std::vector<float>> out;
  if (rank != root) return out;
  for (size_t p = 0; p < counts.size(); ++p) {
    const auto begin = all.begin() + displacements[p];
    out.emplace_back(begin, begin + counts[p]);
  }
  return out;
}

std::vector<std::string> allgather_string(const std::string& text,
                                          std::chrono::milliseconds timeout, const char* what,
                                          FailureChannel* notices) {
  if (!started()) return {text};
  const std::vector<int> lengths =
      allgather_int(checked_count(text.size(), what), timeout, what, notices);
  std::vector<int> displacements;
  size_t total = 0;
  for (int length : lengths) {
    displacements.push_back(checked_count(total, what));
    total += static_cast<size_t>(length);
  }
  std::string all(total, '\0');
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Iallgatherv(text.data(), static_cast<int>(text.size()), MPI_CHAR, all.data(),
                          lengths.data(), displacements.data(), MPI_CHAR, MPI_COMM_WORLD, &request),
          "MPI_Iallgatherv");
  }
  wait_or_throw(request, timeout, what, notices);
  std::vector<std::string> out;
  for (size_t p = 0; p < lengths.size(); ++p) {
    out.push_back(
        all.substr(static_cast<size_t>(displacements[p]), static_cast<size_t>(lengths[p])));
  }
  return out;
}

std::string broadcast_string(const std::string& text, int root, std::chrono::milliseconds timeout,
                             const char* what, FailureChannel* notices) {
  if (!started()) return text;
  int length = checked_count(text.size(), what);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Ibcast(&length, 1, MPI_INT, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  }
  wait_or_throw(request, timeout, what, notices);
  std::string out = text;
  out.resize(static_cast<size_t>(length));
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Ibcast(out.data(), length, MPI_CHAR, root, MPI_COMM_WORLD, &request), "MPI_Ibcast");
  }
  wait_or_throw(request, timeout, what, notices);
  return out;
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
  if (g_notice_comm == MPI_COMM_NULL) return;  // MPI was not started: one process
  state_ = std::make_unique<State>();
  State& s = *state_;
  s.tag = g_next_notice_tag;
  g_next_notice_tag = g_next_notice_tag % 30000 + 1;  // MPI guarantees tags up to 32767
  check(MPI_Comm_rank(g_notice_comm, &s.rank), "MPI_Comm_rank");
  check(MPI_Comm_size(g_notice_comm, &s.size), "MPI_Comm_size");
  check(MPI_Irecv(s.inbox.data(), static_cast<int>(s.inbox.size()), MPI_CHAR, MPI_ANY_SOURCE,
                  s.tag, g_notice_comm, &s.receive),
        "MPI_Irecv (failure notices)");
}

FailureChannel::~FailureChannel() {
  if (!state_) return;
  std::lock_guard lock(mpi_mutex());
  State& s = *state_;
  if (s.receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&s.receive);
    MPI_Wait(&s.receive, MPI_STATUS_IGNORE);
  }
  // A notice to a process that is gone may never complete; it must not hold this one up.
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(100);
  for (MPI_Request& send : s.sends) {
    int done = 0;
    while (MPI_Test(&send, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!done && send != MPI_REQUEST_NULL) MPI_Request_free(&send);
  }
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
                  g_notice_comm, &request) == MPI_SUCCESS) {
      s.sends.push_back(request);
    }
  }
}

std::optional<FailureNotice> FailureChannel::notice() {
  if (!state_) return std::nullopt;
  std::lock_guard lock(mpi_mutex());
  State& s = *state_;
  if (s.received || s.receive == MPI_REQUEST_NULL) return s.received;
  int done = 0;
  MPI_Status status;
  check(MPI_Test(&s.receive, &done, &status), "MPI_Test (failure notice)");
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
  // Notices nobody received (their run ended first) are dropped with the communicator.
  if (g_notice_comm != MPI_COMM_NULL) MPI_Comm_free(&g_notice_comm);
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
