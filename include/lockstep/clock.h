// The one clock of step marks, traces and trace spans: the host's steady clock, in nanoseconds.
// Host devices stamp it directly; a GPU's own clock is mapped onto it once per device (the
// engine calibrates each device's clock). It is the machine's clock, so processes
// on one machine share it too (scripts/merge-traces relies on that).
#pragma once

#include <chrono>
#include <cstdint>

namespace ls {

inline int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace ls
