// What lockstep-soak-run's scenarios share: their time bounds and the verdict they print.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace ls::soak {

using Clock = std::chrono::steady_clock;

// Slack on top of each bound for a loaded 2-core machine running 4 replica threads: the
// watchdog polls every 100 ms and first sees a wait up to one poll after it began.
inline constexpr double kMarginS = 1.0;
// An exception or a desync needs no timeout to be noticed: it aborts the run at once.
inline constexpr double kPromptS = 2.0;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Collects unmet expectations; the run passes when there are none.
class Verdict {
 public:
  void expect(bool ok, const std::string& expected, const std::string& seen) {
    if (!ok) {
      problems_ += (problems_.empty() ? "" : "; ") + ("expected " + expected + ", seen " + seen);
    }
  }
  bool passed() const { return problems_.empty(); }
  // Prints the one result line and returns the exit status.
  int report(const std::string& scenario, const std::string& details) const {
    if (passed()) {
      std::printf("PASS %s: %s\n", scenario.c_str(), details.c_str());
      return 0;
    }
    std::printf("FAIL %s: %s | %s\n", scenario.c_str(), problems_.c_str(), details.c_str());
    return 1;
  }

 private:
  std::string problems_;
};

}  // namespace ls::soak
