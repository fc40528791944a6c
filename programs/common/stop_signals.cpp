// StopSignals (see stop_signals.h).
//
// Two receivers share one async-signal-safe function, record_stop_signal(). Threads started
// after the constructor block SIGINT and SIGTERM; the waiter thread takes them with sigtimedwait().
// But some threads exist before main() (OpenBLAS starts its pool when the library loads) and do
// not block them; a handler installed with sigaction() covers a signal delivered to one of those.
// A signal the parent set to be ignored (a non-interactive shell's background job ignores
// SIGINT) stays ignored, as POSIX programs conventionally do.
#include "programs/common/stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <system_error>

namespace {

std::atomic<int> g_first_signal{0};  // one StopSignals per process

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Async-signal-safe: an atomic, write() and _exit() only.
void record_stop_signal(int sig) {
  int expected = 0;
  if (g_first_signal.compare_exchange_strong(expected, sig)) {
    write_stderr(sig == SIGINT ? "\nSIGINT" : "\nSIGTERM");
    write_stderr(" received: stopping after the current step (send it again to stop at once)\n");
    return;
  }
  // The second signal: the user will not wait. Leftover checkpoint temporaries are removed by
  // the next save, and `latest` still names a complete checkpoint.
  write_stderr(sig == SIGINT ? "SIGINT" : "SIGTERM");
  write_stderr(" received again: exiting now\n");
  ::_exit(128 + sig);
}

void on_stop_signal(int sig) { record_stop_signal(sig); }

bool ignored_by_parent(int sig) {
  struct sigaction current {};
  return ::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

}  // namespace

StopSignals::StopSignals() {
  ::signal(SIGXFSZ, SIG_IGN);
  sigemptyset(&handled_);
  for (int sig : {SIGINT, SIGTERM}) {
    if (ignored_by_parent(sig)) continue;
    sigaddset(&handled_, sig);
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(sig, &action, nullptr);
  }
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &handled_, nullptr); rc != 0) {
    throw std::system_error(rc, std::generic_category(), "pthread_sigmask");
  }
  waiter_ = std::thread([this] { wait_for_signals(); });
}

// Gives the signals back to the default action and unblocks them, so that a hang in the
// program's own tear-down after this point still ends with Ctrl-C.
StopSignals::~StopSignals() {
  shutting_down_.store(true);
  waiter_.join();  // within one sigtimedwait period
  for (int sig : {SIGINT, SIGTERM}) {
    if (sigismember(&handled_, sig)) ::signal(sig, SIG_DFL);
  }
  ::pthread_sigmask(SIG_UNBLOCK, &handled_, nullptr);
}

bool StopSignals::stop_requested() const { return g_first_signal.load() != 0; }

int StopSignals::signal() const { return g_first_signal.load(); }

const char* StopSignals::signal_name() const {
  switch (signal()) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "no signal";
  }
}

// sigtimedwait with a short period rather than a wake-up signal: the destructor only sets a flag,
// and no other signal needs to be reserved (a process-directed SIGUSR2 would reach threads that
// predate main() and kill the process).
void StopSignals::wait_for_signals() {
  const timespec period{0, 100'000'000};  // 100 ms: how long the destructor may wait
  while (!shutting_down_.load()) {
    const int received = ::sigtimedwait(&handled_, nullptr, &period);
    if (received == SIGINT || received == SIGTERM) record_stop_signal(received);
  }
}
