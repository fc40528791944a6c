// Seams of DataParallel for tests and tools (internal): decorators wrapped around each replica's
// communicator, so failure paths are exercised without fault code in the engine's step path.
// A decorator sits between the replica and its flight recorder, so whatever it changes (a
// collective skipped, a count altered) is seen by the desync check and the watchdog as a real
// replica's behaviour would be.
#pragma once

#include <functional>
#include <memory>

#include "parallel/communicator.h"

namespace ls {

struct EngineHooks {
  // Called on replica `rank`'s thread with its communicator; returns the one the replica uses.
  std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator> inner, int rank)>
      wrap_communicator;
};

}  // namespace ls
