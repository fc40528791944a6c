// lockstep-train --strategy auto: runs the planner (lockstep/planner.h) on the workload and the
// devices, prints its table and recommendation, and sets --shard or --pipeline as recommended
// (the first strategy that fits, in the order data parallel, ZeRO-1, ZeRO-2, pipeline with the
// fewest stages). When nothing fits it is an ls::Error with the planner's reason (exit 1).
#pragma once

#include <vector>

#include "programs/train/train_options.h"
#include "programs/common/workload.h"

void apply_auto_strategy(TrainOptions& o, const WorkloadOptions& workload,
                         const std::vector<ls::Device>& devices);
