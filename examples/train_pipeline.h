// lockstep-train --pipeline P: trains the workload with pipeline parallelism (ls::Pipeline) and
// reports the loss, throughput and the measured pipeline bubble next to the theoretical one.
// Returns the exit code (0, or 130 / 143 when a stop signal ended the run).
#pragma once

#include <lockstep/lockstep.h>

#include <vector>

#include "examples/stop_signals.h"
#include "examples/train_options.h"

int train_pipeline(const TrainOptions& o, const std::vector<ls::Device>& devices,
                   const StopSignals& stop);
