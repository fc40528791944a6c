// One run of the scaling test: trains on the first N devices (of every process, under mpirun)
// and measures it.
//
// run_scale_point builds a DataParallel on the given devices, trains `warmup` untimed steps on
// the real data, then times the remaining steps split into `windows` windows. Timed work is
// taking the next batch (gathered ahead on a background thread, data::Prefetcher) plus
// DataParallel::step (which returns once every replica has finished);
// reading the step's timeline afterwards is not timed. Progress goes to the ProgressBar.
// Returns nullopt when a stop signal (Ctrl-C, SIGTERM) arrives: it ends the run after the
// current step. Throws ls::Error (from the engine) on runtime failures.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/data/dataset.h>
#include "programs/common/stop_signals.h"
#include "programs/common/workload.h"
#include <lockstep/data_parallel.h>
#include <lockstep/world.h>
#include "progress.h"
#include "scale_options.h"

struct ScalePoint {
  int processes = 1;                    // the run spans this many processes
  int devices = 0;                      // over every process
  std::vector<ls::Device> device_list;  // process 0's
  int64_t global_batch = 0;
  bool graphs = false;  // steps could run as graphs (DataParallel::graphs())
  std::vector<int64_t> widths;  // the MLP's layer widths, input to output (mlp only)
  int64_t params = 0;
  int64_t buckets = 0;
  std::vector<double> window_samples_per_s;  // one per timed window
  double samples_per_s = 0;                  // median over the windows
  double tokens_per_s = 0;                   // samples_per_s x tokens per example (sequences)
  double step_ms_median = 0;                 // median over the timed steps
  double comm_exposed_ms = 0;  // median over timed steps of max(0, last bucket end - backward end)
  double comm_total_ms = 0;    // median over timed steps of the summed bucket all-reduce times
  double final_loss = 0;       // mean loss of the last (up to) 10 steps
  double wall_s = 0;           // the whole run, construction and warm-up included
  ls::DataParallel::StateBytes state_bytes;  // replica 0's parameters, gradients, optimizer state
  int64_t peak_bytes = 0;      // replica 0's allocator peak over the run
  double efficiency = 0;       // filled by the report: per-device rate / the smallest run's
  ls::UseVerdict use;          // how each of this process's devices spent the steps
};

// `world`: every process of it trains together on its local devices (every process calls
// this; a stop is agreed step by step); null: this process alone on `devices`.
std::optional<ScalePoint> run_scale_point(const ScaleOptions& options, const Workload& work,
                                          const std::vector<ls::Device>& devices,
                                          const ls::World* world, ProgressBar& progress,
                                          const StopSignals& stop);

double median(std::vector<double> values);
