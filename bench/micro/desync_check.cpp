// The cost of the in-process desync check that every collective of a data-parallel step goes
// through (parallel/flight_recorder.h): one fingerprint comparison per replica per collective.
// Multiply by the collectives per step (gradient buckets + the loss sum) and compare with the
// step time (dp_step) to get its share of a step.
#include <benchmark/benchmark.h>

#include "parallel/flight_recorder.h"

namespace {

void BM_desync_check(benchmark::State& state) {
  const int replicas = static_cast<int>(state.range(0));
  ls::DesyncChecker checker(replicas);
  const ls::CollectiveFingerprint fingerprint{ls::CollectiveKind::kAllReduce, ls::DType::kF32,
                                              1 << 20, ls::ReduceOp::kSum, -1};
  const std::string label = "bucket 0";
  int64_t sequence = 0;
  for (auto _ : state) {
    ++sequence;
    for (int r = 0; r < replicas; ++r) checker.check(sequence, r, fingerprint, label);
  }
  // One iteration = one collective checked on every replica: the Time column is its cost.
}
BENCHMARK(BM_desync_check)->Name("desync_check/replicas")->Arg(2)->Arg(8);

}  // namespace
