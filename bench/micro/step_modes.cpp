// A GPT training step in each precision, eager or as a graph (issue 12): tokens/s, the host's time
// to enqueue one step (step_async with an empty queue: autograd, checks and dispatch, or one graph
// launch), the graph's node count (the launches an eager step makes), and on GPUs the MFU.
//   step_modes/gpt/host:1/{f32,bf16,f16}/{eager,graph}: 2 layers, hidden 128, 4 heads, seq 64,
//     batch 8, byte vocabulary: host bf16/f16 emulate the rounding in f32 (no bf16 units used).
//   step_modes/gpt4x256/host:1/{f32,bf16}/eager: 4 layers, hidden 256, seq 128, batch 8, the
//     shape bench/peers/pytorch_gpt.py is compared at (its --precision bf16: CPU autocast).
//   Gpt2/124M/cuda:0/{f32,bf16}/{eager,graph}: GPT-2 small's shape (12 layers, 12 heads, hidden
//     768, vocabulary 50257, seq 1024), batch 16; MFU against the H200's dense bf16 peak,
//     989 TFLOP/s (NVIDIA H200 datasheet: 1,979 TFLOP/s "with sparsity", half of it dense).
//     Registered only when a GPU is present (scripts/gpu-check runs them).
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <string>

#include "bench_config.h"
#include "bench_util.h"
#include <lockstep/data_parallel.h>

namespace ls::bench {
namespace {

constexpr double kH200DenseBf16Flops = 989e12;

struct StepMode {
  std::string name;
  Device device;
  nn::TransformerConfig config;
  int64_t batch;
  Precision precision;
  bool graphs;
  double peak_flops;  // 0: no MFU counter
};

void run_step_mode(benchmark::State& state, const StepMode& mode) {
  using Clock = std::chrono::steady_clock;
  DataParallelOptions options;
  options.precision = mode.precision;
  options.graphs = mode.graphs;
  options.notice = [](const std::string&) {};
  DataParallel trainer({mode.device}, transformer_factory(mode.config), make_optimizer_factory({}),
                       options);
  const data::Batch tokens =
      random_tokens(mode.batch, mode.config.max_seq, static_cast<int32_t>(mode.config.vocab));
  for (int s = 0; s < 4; ++s) trainer.step(tokens);  // warm-up, and the capture (graphs)
  double host_seconds = 0;
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    const int64_t step = trainer.step_async(tokens);  // the queue is empty: enqueue cost only
    host_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    benchmark::DoNotOptimize(trainer.result(step).loss);
  }
  const auto iterations = static_cast<double>(state.iterations());
  const double token_count = static_cast<double>(mode.batch * mode.config.max_seq) * iterations;
  const double flops = token_count * mode.config.train_flops_per_token(mode.config.max_seq);
  state.counters["tokens_per_s"] = benchmark::Counter(token_count, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] =
      benchmark::Counter(flops, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  if (mode.peak_flops > 0) {
    state.counters["MFU"] =
        benchmark::Counter(flops / mode.peak_flops, benchmark::Counter::kIsRate);
  }
  state.counters["host_ms_per_step"] = 1000 * host_seconds / iterations;
  state.counters["graph_nodes"] = static_cast<double>(trainer.graph_nodes());
  state.counters["graph_launches"] = static_cast<double>(trainer.graph_launches());
}

void register_step_modes(const BenchConfig& config) {
  std::vector<StepMode> modes;
  const Device host0{DeviceKind::kHost, 0};
  const nn::TransformerConfig small = nn::gpt_config(2, 4, 128, 64, 258);
  for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kF16}) {
    for (bool graphs : {false, true}) {
      modes.push_back({"step_modes/gpt/host:1/", host0, small, 8, p, graphs, 0});
    }
  }
  const nn::TransformerConfig larger = nn::gpt_config(4, 4, 256, 128, 258);
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    modes.push_back({"step_modes/gpt4x256/host:1/", host0, larger, 8, p, false, 0});
  }
  if (config.gpu_count > 0) {
    const nn::TransformerConfig gpt2 = nn::gpt_config(12, 12, 768, 1024, 50257);
    const Device cuda0{DeviceKind::kCuda, 0};
    for (Precision p : {Precision::kF32, Precision::kBF16}) {
      for (bool graphs : {false, true}) {
        modes.push_back({"Gpt2/124M/cuda:0/", cuda0, gpt2, 16, p, graphs, kH200DenseBf16Flops});
      }
    }
  }
  for (const StepMode& mode : modes) {
    const std::string name =
        mode.name + precision_name(mode.precision) + (mode.graphs ? "/graph" : "/eager");
    benchmark::RegisterBenchmark(name.c_str(),
                                 [mode](benchmark::State& state) { run_step_mode(state, mode); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

const bool kRegistered = add_registrar(register_step_modes);

}  // namespace
}  // namespace ls::bench
