// Ctrl-C and SIGTERM for lockstep's programs: a request to stop after the current step.
//
// The constructor blocks SIGINT and SIGTERM in the calling thread, so every thread started
// afterwards (replica threads, kernel workers, the watchdog) inherits the mask: no signal ever
// interrupts a replica in the middle of a step or a collective. One dedicated thread takes the
// two signals with sigtimedwait() (a handler covers threads that predate main(); see the .cpp). The
// first one is recorded (stop_requested()); the program finishes
// its current step, writes a checkpoint when it keeps them, joins its threads and exits with
// exit_code() (128 + the signal: 130 for SIGINT, 143 for SIGTERM, as shells report). A second
// one exits the process at once (128 + that signal), for a user who will not wait.
//
// It also ignores SIGXFSZ, so a file growing past the file-size limit (ulimit -f) fails its
// write() with EFBIG, which the checkpoint writer reports, instead of killing the process.
//
// Construct one, first thing in main(), before anything starts a thread. Not copyable.
#pragma once

#include <signal.h>

#include <atomic>
#include <thread>

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool stop_requested() const;
  // The first signal received (SIGINT or SIGTERM), 0 if none.
  int signal() const;
  // "SIGINT" / "SIGTERM".
  const char* signal_name() const;
  int exit_code() const { return 128 + signal(); }

 private:
  void wait_for_signals();

  sigset_t handled_;
  std::atomic<bool> shutting_down_{false};
  std::thread waiter_;
};
