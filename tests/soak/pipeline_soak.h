// The fault soak's pipeline scenarios (lockstep-soak-run --pipeline P --schedule S): a pipeline
// of P stages (devices / P pipelines) trains an MLP of 2P layers, stage s holding layers 2s and
// 2s+1; layer 2f is a FaultyLinear that injects the scenario's fault when stage f first runs it
// in the faulty step, in every pipeline. What must happen: an exception in forward or backward
// ends the step with one ls::Error naming the stage and the phase, within 2 s; a stall in
// forward ends it with a timeout naming the stalled stage, within the stall (or the timeout) and
// a second; a NaN output skips the step on every stage, parameters unchanged, and training goes
// on; after an error the pipeline refuses further steps and is destroyed within 2 s.
#pragma once

#include "soak/scenario.h"

namespace ls::soak {

// Runs the scenario (s.pipeline > 0), prints one PASS or FAIL line, returns 0 or 1.
int run_pipeline(const Scenario& s);

}  // namespace ls::soak
