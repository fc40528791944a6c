// ls::Error's kinds, formats its what() and keeps the per-thread context.
// what() is "message [context]", and for kind internal (a lockstep bug, which its reader reports)
// "message [context] (file:line)": a user's mistake, a missing file or a stalled run is told in
// words, without the source path the user cannot act on (file() and line() still hold it).
#include <lockstep/error.h>

namespace ls {
namespace {
thread_local std::string t_context;

std::string format_what(const std::string& message, const char* file, int line,
                        const std::string& context, ErrorKind kind) {
  std::ostringstream what;
  what << message;
  if (!context.empty()) what << " [" << context << "]";
  if (kind == ErrorKind::kInternal) what << " (" << file << ":" << line << ")";
  return what.str();
}
}  // namespace

Error::Error(std::string message, const char* file, int line, std::string context, ErrorKind kind)
    : std::runtime_error(format_what(message, file, line, context, kind)),
      message_(std::move(message)),
      file_(file),
      line_(line),
      context_(std::move(context)),
      kind_(kind) {}

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return "usage";
    case ErrorKind::kIo: return "io";
    case ErrorKind::kInternal: return "internal";
    case ErrorKind::kAborted: return "aborted";
    case ErrorKind::kTimeout: return "timeout";
    case ErrorKind::kDesync: return "desync";
    case ErrorKind::kNonFinite: return "non_finite";
  }
  return "unknown";
}

void set_thread_error_context(std::string context) { t_context = std::move(context); }
const std::string& thread_error_context() { return t_context; }

namespace detail {
void throw_error(ErrorKind kind, std::string message, const char* file, int line) {
  throw Error(std::move(message), file, line, t_context, kind);
}
}  // namespace detail
}  // namespace ls
