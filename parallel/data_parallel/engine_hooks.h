// Seams of DataParallel for tests and tools (internal; the public constructors take none):
// decorators wrapped around each replica's communicator, so failure paths are exercised without
// fault code in the engine's step path. A decorator sits between the replica and its flight
// recorder, so whatever it changes (a collective skipped, a count altered) is seen by the desync
// check and the watchdog as a real replica's behaviour would be.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <lockstep/data_parallel.h>
#include <lockstep/world.h>

#include "parallel/comm/communicator.h"

namespace ls {

struct EngineHooks {
  // Called on replica `rank`'s thread with its communicator; returns the one the replica uses.
  std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator> inner, int rank)>
      wrap_communicator;
  // Called on replica `rank`'s thread just before it stages each step's input (a stall here is
  // an input path slow on one device).
  std::function<void(int rank)> before_upload;
};

// A DataParallel as its public constructors make it, with `hooks` applied.
std::unique_ptr<DataParallel> make_data_parallel(std::vector<Device> devices, ModelFactory model,
                                                 OptimizerFactory optimizer,
                                                 DataParallelOptions options,
                                                 const EngineHooks& hooks);
std::unique_ptr<DataParallel> make_data_parallel(const World& world, ModelFactory model,
                                                 OptimizerFactory optimizer,
                                                 DataParallelOptions options,
                                                 const EngineHooks& hooks);

}  // namespace ls
