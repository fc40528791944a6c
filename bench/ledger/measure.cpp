// The step ledger measured on a device (bench/ledger/measure.h).
#include "bench/ledger/measure.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <span>

#include "bench/micro/bench_util.h"
#include "engine/core/runtime.h"
#include "engine/model/checkpoint/atomic_file.h"
#include "ops/elementwise.h"
#include "ops/gemm_epilogue.h"

namespace ls::ledger {
namespace {

// The median of `calls` timings of work(), each between two events on `stream`, after one
// untimed call.
template <typename Work>
double median_seconds(Stream& stream, int calls, Work work) {
  DeviceRuntime& runtime = device_runtime(stream.device());
  work();
  std::vector<double> seconds;
  for (int i = 0; i < calls; ++i) {
    std::unique_ptr<Event> start = runtime.create_event(), end = runtime.create_event();
    stream.record(*start);
    work();
    stream.record(*end);
    end->synchronize();
    seconds.push_back(end->elapsed_ms_since(*start) * 1e-3);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

Tensor random_bf16(int64_t rows, int64_t cols, uint32_t seed, Device device, Stream& stream) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (float& v : values) v = uniform(rng);
  return cast_to_bf16(Tensor::from_host(values, {rows, cols}, device, stream), stream);
}

}  // namespace

Ceilings measure_ceilings(Device device, int64_t gemm_side, int64_t copy_bytes) {
  std::unique_ptr<Stream> stream = device_runtime(device).create_stream();
  Ceilings c;
  const int64_t kSide = gemm_side;
  {
    const Tensor a = random_bf16(kSide, kSide, 1, device, *stream);
    const Tensor b = random_bf16(kSide, kSide, 2, device, *stream);
    const Tensor d = Tensor::empty({kSide, kSide}, DType::kBF16, device);
    const double s = median_seconds(*stream, 10, [&] {
      matmul_bf16_epilogue(a, false, b, true, GemmEpilogue::kNone, Tensor(), Tensor(), d, *stream);
    });
    c.gemm_flops_per_s = 2.0 * static_cast<double>(kSide * kSide) * static_cast<double>(kSide) / s;
  }
  {
    const int64_t kFloats = copy_bytes / 4;
    const Tensor src = Tensor::empty({kFloats}, DType::kF32, device);
    const Tensor dst = Tensor::empty({kFloats}, DType::kF32, device);
    fill(src, 1.0f, *stream);
    const double s = median_seconds(*stream, 10, [&] { dst.copy_from(src, *stream); });
    c.copy_bytes_per_s = 2.0 * static_cast<double>(src.nbytes()) / s;
  }
  stream->synchronize();
  return c;
}

MeasuredStep measure_step(const nn::TransformerConfig& config, int64_t batch, Precision precision,
                          Device device, int steps) {
  LS_CHECK(steps >= 3, "measure_step: ", steps, " steps; the third is the one timed");
  DataParallelOptions options;
  options.precision = precision;
  options.graphs = false;
  options.notice = [](const std::string&) {};
  DataParallel trainer({device}, transformer_factory(config), make_optimizer_factory({}), options);
  const data::Batch tokens =
      bench::random_tokens(batch, config.max_seq, static_cast<int32_t>(config.vocab));
  MeasuredStep m;
  for (int s = 0; s < steps; ++s) {
    if (s != 2) {
      m.losses.push_back(trainer.step(tokens).loss);
      continue;
    }
    OpLedger ledger({.plan_as = std::nullopt, .timed = true});
    const auto start = std::chrono::steady_clock::now();
    m.losses.push_back(trainer.step(tokens).loss);  // the step result waits for the device
    m.step_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    m.rows = ledger.measured();
  }
  const std::vector<float> parameters = trainer.parameters(0);
  m.parameter_hash = checkpoint::crc32_of(std::as_bytes(std::span<const float>(parameters)));
  return m;
}

}  // namespace ls::ledger
