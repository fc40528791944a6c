// A one-line progress display for the scaling runs, written to stderr.
//
// On a terminal the line is redrawn in place with '\r' (at most ~10 times a second); otherwise
// (a pipe, a CI log) it prints plain lines only at phase changes and window ends, so logs stay
// short. Not thread-safe: one caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

class ProgressBar {
 public:
  // shown = false: draws nothing (the processes other than 0 under mpirun).
  explicit ProgressBar(bool shown = true);
  // Starts a run: `label` names it, `total` is the step count.
  void begin(std::string label, int64_t total);
  // Step `done` of total finished; `status` says what is happening (e.g. "window 2/5").
  // `milestone` forces output even when not on a terminal.
  void update(int64_t done, const std::string& status, bool milestone);
  // Ends the run's line with a summary.
  void end(const std::string& summary);

 private:
  void draw(int64_t done, const std::string& status);

  bool shown_;
  bool tty_;
  std::string label_;
  int64_t total_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
  size_t last_width_ = 0;
};
