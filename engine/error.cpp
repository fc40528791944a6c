// Formats ls::Error's what() as "message [context] (file:line)" and keeps the per-thread context.
#include "engine/error.h"

namespace ls {
namespace {
thread_local std::string t_context;

std::string format_what(const std::string& message, const char* file, int line,
                        const std::string& context) {
  std::ostringstream what;
  what << message;
  if (!context.empty()) what << " [" << context << "]";
  what << " (" << file << ":" << line << ")";
  return what.str();
}
}  // namespace

Error::Error(std::string message, const char* file, int line, std::string context)
    : std::runtime_error(format_what(message, file, line, context)),
      message_(std::move(message)),
      file_(file),
      line_(line),
      context_(std::move(context)) {}

void set_thread_error_context(std::string context) { t_context = std::move(context); }
const std::string& thread_error_context() { return t_context; }

namespace detail {
void throw_error(std::string message, const char* file, int line) {
  throw Error(std::move(message), file, line, t_context);
}
}  // namespace detail
}  // namespace ls
