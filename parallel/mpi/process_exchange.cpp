// The collectives between processes (allgather_int, allgather_doubles, gather_floats,
// allgather_string, broadcast_string; parallel/mpi/mpi_runtime.h) on their own communicator.
//
// Every exchange is two non-blocking steps, each polled until the timeout or a failure notice:
//   1. a header allgather, the same shape for every kind: {hash of `what`, value} per process.
//      A process at another exchange has another hash: every process then raises a `desync`
//      error naming both exchanges' processes, before any payload moves (the headers matched,
//      so the communicator stays in step). The value carries the int (allgather_int) or this
//      process's element count (the others), so receivers size their buffers from it;
//   2. the payload (MPI_Iallgather, MPI_Iallgatherv, MPI_Igatherv, MPI_Ibcast), if any.
// An exchange given up on buries its buffers and poisons the communicator (mpi_state.h).
#include <mpi.h>

#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>

#include <lockstep/error.h>
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/mpi/mpi_state.h"
#include "parallel/mpi/mpi_wait.h"

namespace ls::mpi {
namespace {

// One exchange's request and every buffer MPI may write into or read from while it runs.
struct Exchange {
  MPI_Request request = MPI_REQUEST_NULL;
  std::array<int64_t, 2> header{};  // {hash of what, value}
  std::vector<int64_t> headers;     // every process's
  int rank = 0;                     // this process in the exchanges' communicator
  std::vector<char> send, recv;
  std::vector<int> counts, displacements;
};

uint64_t hash_of(const char* what) {  // FNV-1a: the same text gives the same value everywhere
  uint64_t h = 1469598103934665603ull;
  for (const char* c = what; *c != '\0'; ++c)
    h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
  return h;
}

// Whether this process runs under MPI (the exchanges are otherwise a world of one).
bool started() {
  std::lock_guard lock(mpi_mutex());
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0 && state().exchanges != MPI_COMM_NULL;
}

int checked_count(size_t count, const char* what) {
  LS_CHECK(count <= static_cast<size_t>(INT_MAX), what, ": ", count,
           " values in one MPI message is more than MPI's int count allows (", INT_MAX, ")");
  return static_cast<int>(count);
}

// Waits for x's request; on a timeout or a notice buries x, poisons the exchanges and throws.
void finish(const std::shared_ptr<Exchange>& x, std::chrono::milliseconds timeout, const char* what,
            FailureChannel* notices) {
  const auto arrived = [notices] { return notices != nullptr && notices->notice().has_value(); };
  const WaitEnd end = wait_all(&x->request, 1, Clock::now() + timeout, arrived);
  if (end == WaitEnd::kDone) return;
  {
    std::lock_guard lock(mpi_mutex());
    bury(x);
    state().poisoned = detail::concat("'", what, "' was given up");
  }
  if (end == WaitEnd::kStopped) {
    const FailureNotice notice = *notices->notice();
    LS_THROW_AS(notice.kind, notice.message);  // the other process's error, word for word
  }
  LS_THROW_AS(ErrorKind::kTimeout, what, ": the processes did not all take part within ",
              timeout.count(),
              " ms (a process that died, was stopped, or no longer makes the same calls)");
}

// Step 1 for every exchange: starts it (checks the communicator is usable), allgathers the
// headers and compares the hashes. Returns the exchange with every process's header.
std::shared_ptr<Exchange> exchange_headers(int64_t value, std::chrono::milliseconds timeout,
                                           const char* what, FailureChannel* notices) {
  auto x = std::make_shared<Exchange>();
  x->header = {static_cast<int64_t>(hash_of(what)), value};
  int size = 1;
  {
    std::lock_guard lock(mpi_mutex());
    LS_CHECK_AS(ErrorKind::kAborted, state().poisoned.empty(), what,
                ": the processes' exchanges are out of step since an earlier one (",
                state().poisoned,
                ") could not finish; this job cannot continue: end it and restart from the "
                "last checkpoint");
    check(MPI_Comm_size(state().exchanges, &size), "MPI_Comm_size");
    check(MPI_Comm_rank(state().exchanges, &x->rank), "MPI_Comm_rank");
    x->headers.resize(2 * static_cast<size_t>(size));
    check(MPI_Iallgather(x->header.data(), 2, MPI_INT64_T, x->headers.data(), 2, MPI_INT64_T,
                         state().exchanges, &x->request),
          "MPI_Iallgather (exchange header)");
  }
  finish(x, timeout, what, notices);
  for (int p = 0; p < size; ++p) {
    LS_CHECK_AS(ErrorKind::kDesync, x->headers[2 * static_cast<size_t>(p)] == x->header[0],
                "exchanges between processes out of step: process ", x->rank, " is at '", what,
                "' but process ", p,
                " is at another exchange; every process must make the same calls in the same "
                "order (the same program, flags and data)");
  }
  return x;
}

int64_t value_of(const Exchange& x, int process) {
  return x.headers[2 * static_cast<size_t>(process) + 1];
}

// The v-collectives' layout from the headers' values (each process's element count): fills
// x->counts and x->displacements, process-major, and returns the total.
size_t layout_from_headers(Exchange& x, const char* what) {
  size_t total = 0;
  for (size_t p = 0; p < x.headers.size() / 2; ++p) {
    x.displacements.push_back(checked_count(total, what));
    x.counts.push_back(checked_count(static_cast<size_t>(value_of(x, static_cast<int>(p))), what));
    total += static_cast<size_t>(x.counts.back());
  }
  return total;
}

// Every process's bytes (any count each, from the headers) into x->recv, process-major.
void allgatherv_bytes(const std::shared_ptr<Exchange>& x, std::chrono::milliseconds timeout,
                      const char* what, FailureChannel* notices) {
  const size_t total = layout_from_headers(*x, what);
  x->recv.assign(std::max<size_t>(total, 1), '\0');
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Iallgatherv(x->send.data(), static_cast<int>(x->send.size()), MPI_CHAR,
                          x->recv.data(), x->counts.data(), x->displacements.data(), MPI_CHAR,
                          state().exchanges, &x->request),
          "MPI_Iallgatherv");
  }
  finish(x, timeout, what, notices);
}

}  // namespace

std::vector<int> allgather_int(int value, std::chrono::milliseconds timeout, const char* what,
                               FailureChannel* notices) {
  if (!started()) return {value};
  const std::shared_ptr<Exchange> x = exchange_headers(value, timeout, what, notices);
  std::vector<int> all;
  for (size_t p = 0; p < x->headers.size() / 2; ++p) {
    all.push_back(static_cast<int>(value_of(*x, static_cast<int>(p))));
  }
  return all;
}

std::vector<double> allgather_doubles(std::span<const double> mine,
                                      std::chrono::milliseconds timeout, const char* what,
                                      FailureChannel* notices) {
  if (!started()) return {mine.begin(), mine.end()};
  const auto bytes = static_cast<int64_t>(mine.size_bytes());
  const std::shared_ptr<Exchange> x = exchange_headers(bytes, timeout, what, notices);
  for (size_t p = 0; p < x->headers.size() / 2; ++p) {
    LS_CHECK_AS(ErrorKind::kDesync, value_of(*x, static_cast<int>(p)) == bytes, what, ": process ",
                p, " sent ", value_of(*x, static_cast<int>(p)) / 8, " values, this one ",
                mine.size(), "; every process must send as many");
  }
  x->send.assign(reinterpret_cast<const char*>(mine.data()),
                 reinterpret_cast<const char*>(mine.data()) + bytes);
  allgatherv_bytes(x, timeout, what, notices);
  std::vector<double> all(x->recv.size() / sizeof(double));
  std::memcpy(all.data(), x->recv.data(), all.size() * sizeof(double));
  return all;
}

std::vector<std::string> allgather_string(const std::string& text,
                                          std::chrono::milliseconds timeout, const char* what,
                                          FailureChannel* notices) {
  if (!started()) return {text};
  const std::shared_ptr<Exchange> x =
      exchange_headers(static_cast<int64_t>(text.size()), timeout, what, notices);
  x->send.assign(text.begin(), text.end());
  allgatherv_bytes(x, timeout, what, notices);
  std::vector<std::string> out;
  for (size_t p = 0; p < x->counts.size(); ++p) {
    out.emplace_back(x->recv.data() + x->displacements[p], static_cast<size_t>(x->counts[p]));
  }
  return out;
}

std::vector<std::vector<float>> gather_floats(std::span<const float> mine, int root,
                                              std::chrono::milliseconds timeout, const char* what,
                                              FailureChannel* notices) {
  if (!started()) return {std::vector<float>(mine.begin(), mine.end())};
  const std::shared_ptr<Exchange> x =
      exchange_headers(checked_count(mine.size(), what), timeout, what, notices);
  const int size = static_cast<int>(x->headers.size() / 2);
  x->send.assign(reinterpret_cast<const char*>(mine.data()),
                 reinterpret_cast<const char*>(mine.data()) + mine.size_bytes());
  const size_t total = layout_from_headers(*x, what);
  if (x->rank == root) x->recv.assign(std::max<size_t>(total, 1) * sizeof(float), '\0');
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Igatherv(x->send.data(), static_cast<int>(mine.size()), MPI_FLOAT, x->recv.data(),
                       x->counts.data(), x->displacements.data(), MPI_FLOAT, root,
                       state().exchanges, &x->request),
          "MPI_Igatherv");
  }
  finish(x, timeout, what, notices);
  std::vector<std::vector<float>> out;
  if (x->rank != root) return out;
  const auto* all = reinterpret_cast<const float*>(x->recv.data());
  for (int p = 0; p < size; ++p) {
    out.emplace_back(
        all + x->displacements[static_cast<size_t>(p)],
        all + x->displacements[static_cast<size_t>(p)] + x->counts[static_cast<size_t>(p)]);
  }
  return out;
}

std::string broadcast_string(const std::string& text, int root, std::chrono::milliseconds timeout,
                             const char* what, FailureChannel* notices) {
  if (!started()) return text;
  // Every process announces its length; root's is the one that counts.
  const std::shared_ptr<Exchange> x =
      exchange_headers(static_cast<int64_t>(text.size()), timeout, what, notices);
  const int length = checked_count(static_cast<size_t>(value_of(*x, root)), what);
  x->recv.assign(static_cast<size_t>(std::max(length, 1)), '\0');
  if (x->rank == root) std::memcpy(x->recv.data(), text.data(), text.size());
  {
    std::lock_guard lock(mpi_mutex());
    check(MPI_Ibcast(x->recv.data(), length, MPI_CHAR, root, state().exchanges, &x->request),
          "MPI_Ibcast");
  }
  finish(x, timeout, what, notices);
  return std::string(x->recv.data(), static_cast<size_t>(length));
}

}  // namespace ls::mpi
