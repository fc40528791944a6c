// The one exception type of lockstep and the macros that raise it.
//
// LS_CHECK(cond, parts...)  a user error (kind usage): the message names the bad value and says
//                           how to fix it.
// LS_CHECK_AS(kind, cond, parts...), LS_THROW_AS(kind, parts...): the same with another kind
//                           (timeout, desync, non_finite, aborted); LS_CHECK_IO / LS_THROW_IO
//                           for files and the disk (kind io).
// LS_ASSERT(cond, parts...) an internal invariant (kind internal); failing it is a lockstep bug.
// Callers branch on Error::kind(), never on the message text.
// The engine's checks of CUDA, NCCL and cuBLAS calls are built on LS_API_CHECK below, so every
// error names the statement and where it ran. Message parts are streamed with operator<<, so any
// printable value can be passed. what() is "message [context]"; an internal error adds
// " (file:line)", which file() and line() give for every kind.
// Thread-safety: the error context (replica, device) is thread-local.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ls {

// What went wrong, for callers that react differently (retry, fix the input, resume).
enum class ErrorKind {
  kUsage,      // a bad argument, option, shape or data value: fix the call
  kIo,         // a file or the disk: missing, unreadable, corrupt, full
  kInternal,   // a failed invariant or a failed CUDA/NCCL/cuBLAS call
  kAborted,    // the work was cancelled because another replica failed or abort() was called
  kTimeout,    // a wait passed its bound (the watchdog, a collective timeout)
  kDesync,     // replicas issued different collectives
  kNonFinite,  // too many steps in a row had NaN/Inf loss or gradients
};
const char* error_kind_name(ErrorKind kind);  // "usage", "io", ...

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line, std::string context = "",
        ErrorKind kind = ErrorKind::kUsage);

  ErrorKind kind() const { return kind_; }
  // The message without location, as given by the code that raised it.
  const std::string& message() const { return message_; }
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  // Where it happened, e.g. "replica 1 on host:2"; empty when unknown.
  const std::string& context() const { return context_; }

 private:
  std::string message_;
  std::string file_;
  int line_;
  std::string context_;
  ErrorKind kind_;
};

// The calling thread's context (e.g. "replica 1 on cuda:1"); every Error raised on this thread
// carries it. Set by the threads that own a device; empty elsewhere.
void set_thread_error_context(std::string context);
const std::string& thread_error_context();

namespace detail {
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}
[[noreturn]] void throw_error(ErrorKind kind, std::string message, const char* file, int line);
}  // namespace detail

}  // namespace ls

#define LS_THROW_AS(kind, ...) \
  ::ls::detail::throw_error(kind, ::ls::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
#define LS_THROW(...) LS_THROW_AS(::ls::ErrorKind::kUsage, __VA_ARGS__)

#define LS_CHECK_AS(kind, cond, ...)  \
  do {                                \
    if (!(cond)) [[unlikely]] {       \
      LS_THROW_AS(kind, __VA_ARGS__); \
    }                                 \
  } while (0)
#define LS_CHECK(cond, ...) LS_CHECK_AS(::ls::ErrorKind::kUsage, cond, __VA_ARGS__)
// Files and the disk: missing, unreadable, corrupt, full.
#define LS_CHECK_IO(cond, ...) LS_CHECK_AS(::ls::ErrorKind::kIo, cond, __VA_ARGS__)
#define LS_THROW_IO(...) LS_THROW_AS(::ls::ErrorKind::kIo, __VA_ARGS__)

#define LS_ASSERT(cond, ...)                                                             \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      LS_THROW_AS(::ls::ErrorKind::kInternal, "internal error (please report): ", #cond, \
                  " failed. " __VA_OPT__(, ) __VA_ARGS__);                               \
    }                                                                                    \
  } while (0)

// Generator for library-call checks: `ok` is the success value, `describe(status)` turns a
// failure into text. The message names the failing statement.
#define LS_API_CHECK(api_name, stmt, ok, describe)                        \
  do {                                                                    \
    auto ls_api_status_ = (stmt);                                         \
    if (ls_api_status_ != (ok)) [[unlikely]] {                            \
      LS_THROW_AS(::ls::ErrorKind::kInternal, api_name, " call `", #stmt, \
                  "` failed: ", describe(ls_api_status_));                \
    }                                                                     \
  } while (0)
