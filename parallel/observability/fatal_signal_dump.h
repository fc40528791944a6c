// When the process dies of a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) while a
// trainer is alive, its flight recorder is written first (issue 25: the last collectives of
// every replica, also after a crash), and stderr names the file. The record's reason is
// "fatal signal".
//
// A signal handler may not allocate or lock, and writing the flight recorder does both: if the
// crash happened inside the allocator, the handler would block forever, turning a crash into a
// hang. So the handler first arms alarm(5) with SIGALRM's default action: at worst the process
// dies 5 s later without the file, never hangs. Then it runs every registered dump, puts back the
// handler that was there before (the default, or a sanitizer's) and raises the signal again, so
// the process ends as it would have without lockstep. A second fatal signal during the dump goes
// straight to the previous handler.
// Thread-safety: registration from any thread; the handler from the crashing one.
#pragma once

#include <functional>
#include <string>

namespace ls {

class FatalSignalDump {
 public:
  // `dump` writes the flight recorder and returns its path; it runs on the crashing thread.
  explicit FatalSignalDump(std::function<std::string()> dump);
  ~FatalSignalDump();
  FatalSignalDump(const FatalSignalDump&) = delete;
  FatalSignalDump& operator=(const FatalSignalDump&) = delete;

  // Runs the dump (the handler calls it).
  std::string run() const { return dump_(); }

 private:
  std::function<std::string()> dump_;
};

}  // namespace ls
