// One scenario of the fault soak (tests/soak/soak.py drives many): what lockstep-soak-run
// trains, which fault it injects where, and where it checkpoints. Parsed from the command line;
// a bad flag exits with 2.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include <lockstep/data_parallel.h>
#include <lockstep/pipeline_schedule.h>
#include "parallel/fault_injection.h"

namespace ls::soak {

struct Scenario {
  int devices = 2;
  std::optional<testing::Fault> fault;  // nullopt: a plain run (the kill -9 scenario's runs)
  int64_t steps = 6;
  uint32_t seed = 1;  // parameters and batches
  ShardMode shard = ShardMode::kNone;      // ZeRO-1, ZeRO-2, ZeRO-3
  Recompute recompute = Recompute::kNone;  // activation checkpointing
  // A pipeline of this many stages (0: data parallel; tests/soak/pipeline_soak.h), and its
  // schedule. The fault's `replica` then names the stage it fires in, in every pipeline.
  int pipeline = 0;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  std::chrono::milliseconds collective_timeout{400};
  std::string checkpoint_dir;  // empty: no checkpoints
  int64_t checkpoint_every = 1;
  bool resume = false;     // continue from checkpoint_dir's latest checkpoint, if any
  std::string digest_out;  // where a plain run writes its final state's digest
};

// "throw-forward", "stall", ...: the names the command line and the driver use.
const char* fault_name(testing::Fault::Kind kind);

// The scenario in one line, for PASS and FAIL lines.
std::string describe(const Scenario& s);

// The scenario, or the exit code to return at once (0 after --help, 2 after a usage error it
// printed).
std::variant<Scenario, int> parse_scenario(int argc, char** argv);

}  // namespace ls::soak
