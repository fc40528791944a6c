// The cost of the in-process desync check that every collective of a data-parallel step goes
// through (parallel/observability/flight_recorder.h): one same_collective() comparison per replica
// per collective. Multiply by the collectives per step (gradient buckets + the loss sum) and
// compare with the step time (dp_step) to get its share of a step.
#include <benchmark/benchmark.h>

#include "parallel/observability/flight_recorder.h"

namespace {

void BM_desync_check(benchmark::State& state) {
  const int replicas = static_cast<int>(state.range(0));
  ls::DesyncChecker checker(replicas);
  ls::CollectiveDesc desc = ls::CollectiveDesc::all_reduce(nullptr, nullptr, 1 << 20,
                                                           ls::DType::kF32, ls::ReduceOp::kSum);
  desc.label = "bucket 0";
  for (auto _ : state) {
    ++desc.seq;
    for (int r = 0; r < replicas; ++r) checker.check(r, desc);
  }
  // One iteration = one collective checked on every replica: the Time column is its cost.
}
BENCHMARK(BM_desync_check)->Name("desync_check/replicas")->Arg(2)->Arg(8);

}  // namespace
