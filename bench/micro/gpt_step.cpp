// The training step of a GPT on one host device (random tokens, next-token loss): tokens/s and
// the model FLOP rate (TransformerConfig::train_flops_per_token), to set against the sgemm
// ceiling of the same run (ceiling/sgemm) and against PyTorch (bench/peers/pytorch_gpt.py).
// Arguments: layers, hidden, seq; batch 8, 4 heads, byte vocabulary (258).
#include <benchmark/benchmark.h>

#include <random>

#include "bench_util.h"
#include <lockstep/data_parallel.h>

namespace {

const ls::Device kHost0{ls::DeviceKind::kHost, 0};

void BM_gpt_step(benchmark::State& state) {
  const int64_t batch = 8;
  ls::nn::TransformerConfig config =
      ls::nn::gpt_config(state.range(0), 4, state.range(1), state.range(2), 258);
  ls::DataParallel trainer({kHost0}, ls::transformer_factory(config),
                           ls::make_optimizer_factory({}));
  const ls::data::Batch tokens = ls::bench::random_tokens(batch, config.max_seq, 258);
  trainer.step(tokens);  // warm-up: fills the allocator's cache
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step(tokens).loss);
  const double token_count =
      static_cast<double>(batch * config.max_seq) * static_cast<double>(state.iterations());
  state.counters["tokens_per_s"] = benchmark::Counter(token_count, benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] =
      benchmark::Counter(token_count * config.train_flops_per_token(config.max_seq),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_gpt_step)->Name("train_step/gpt/host:1")->Args({4, 256, 128})->Args({2, 128, 64})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
