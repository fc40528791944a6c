// Faults DataParallel can inject into one replica at one step, so the failure paths (error
// propagation, the watchdog, desync detection, non-finite skipping) are tested for real.
#pragma once

#include <chrono>
#include <cstdint>

namespace ls {

// Faults to inject, for the tests of the failure paths (and for trying them out by hand).
struct FaultInjection {
  enum class Kind {
    kNone,
    kThrowInForward,   // an exception from the replica's forward pass
    kThrowInBackward,  // ... from its backward pass
    kSkipCollective,   // the replica does not issue the step's last collective (the loss sum)
    kWrongCount,       // it issues its first gradient bucket's all-reduce one element short
    kStall,            // it sleeps in forward for `stall` (a replica stuck in user code)
    kNaN,              // its input batch is all NaN
  };
  Kind kind = Kind::kNone;
  int replica = -1;
  int64_t step = -1;  // 1-based
  std::chrono::milliseconds stall{0};
};

}  // namespace ls
