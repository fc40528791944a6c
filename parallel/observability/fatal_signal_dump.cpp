#include "parallel/observability/fatal_signal_dump.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

namespace ls {
namespace {

constexpr std::array<int, 5> kFatalSignals = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kSlots = 64;  // live trainers with a dump; more are not dumped

std::atomic<FatalSignalDump*> g_dumps[kSlots];
std::atomic<bool> g_dumping{false};
std::mutex g_install_mutex;  // registration only, never the handler
int g_registered = 0;
struct sigaction g_previous[kFatalSignals.size()];

void say(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

size_t index_of(int signal) {
  for (size_t i = 0; i < kFatalSignals.size(); ++i) {
    if (kFatalSignals[i] == signal) return i;
  }
  return 0;
}

void restore_previous_handlers() {
  for (size_t i = 0; i < kFatalSignals.size(); ++i)
    sigaction(kFatalSignals[i], &g_previous[i], nullptr);
}

void on_fatal_signal(int signal) {
  if (!g_dumping.exchange(true)) {
    // Bounded: a dump stuck on a lock the crash holds ends with SIGALRM's default action.
    struct sigaction alarm_default {};
    alarm_default.sa_handler = SIG_DFL;
    sigaction(SIGALRM, &alarm_default, nullptr);
    alarm(5);
    char head[96];
    std::snprintf(head, sizeof head,
                  "lockstep: fatal signal %d (%s); writing the flight recorder\n", signal,
                  strsignal(signal));
    say(head);
    for (auto& slot : g_dumps) {
      const FatalSignalDump* dump = slot.load();
      if (dump == nullptr) continue;
      try {
        const std::string path = dump->run();
        say(("lockstep: the flight recorder is in " + path +
             " (lockstep-doctor --flight " + path + ")\n")
                .c_str());
      } catch (const std::exception& e) {
        say((std::string("lockstep: the flight recorder was not written: ") + e.what() + "\n")
                .c_str());
      }
    }
    alarm(0);
  }
  // As if lockstep had not been here: the previous handler (or the default action) takes it.
  sigaction(signal, &g_previous[index_of(signal)], nullptr);
  raise(signal);
}

}  // namespace

FatalSignalDump::FatalSignalDump(std::function<std::string()> dump) : dump_(std::move(dump)) {
  std::lock_guard lock(g_install_mutex);
  for (auto& slot : g_dumps) {
    FatalSignalDump* empty = nullptr;
    if (slot.compare_exchange_strong(empty, this)) break;
  }
  if (g_registered++ > 0) return;
  struct sigaction action {};
  action.sa_handler = on_fatal_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_NODEFER;  // a fault inside the dump reaches the handler again: see above
  for (size_t i = 0; i < kFatalSignals.size(); ++i) {
    sigaction(kFatalSignals[i], &action, &g_previous[i]);
  }
}

FatalSignalDump::~FatalSignalDump() {
  std::lock_guard lock(g_install_mutex);
  for (auto& slot : g_dumps) {
    FatalSignalDump* me = this;
    if (slot.compare_exchange_strong(me, nullptr)) break;
  }
  if (--g_registered == 0) restore_previous_handlers();
}

}  // namespace ls
