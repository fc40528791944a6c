// profile_model: the planner's model profile, with activations measured by training steps on one
// device (see lockstep/planner.h). A probe is one DataParallel step at two batch sizes (and, for
// transformers, two depths); activation bytes are the allocator's peak above the state bytes,
// linear in rows (and in layers).
#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <thread>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/nn/module.h>
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "parallel/comm/communicator.h"
#include <lockstep/planner.h>

namespace ls {
namespace {

int64_t rounded(int64_t bytes) {
  return static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(bytes)));
}

// Tensors of optimizer state per parameter element: AdamW 2, SGD with momentum 1, without 0.
int optimizer_tensors(const OptimizerSpec& spec) {
  if (spec.kind == "adamw") return 2;
  return spec.momentum != 0.0f ? 1 : 0;
}

// Peak bytes above the training state during one step at `rows` rows.
double activation_bytes(const ModelFactory& model, const ProbeOptions& probe, int64_t rows,
                        Recompute recompute) {
  DataParallelOptions options;
  options.seed = 1;
  options.recompute = recompute;
  DataParallel dp({probe.device}, model, make_optimizer_factory(probe.optimizer), options);
  const DataParallel::StateBytes state = dp.state_bytes(0);
  device_runtime(probe.device).allocator().reset_peak();
  dp.step(probe.batch(rows));
  const int64_t peak = dp.allocator_stats(0).peak_bytes_in_use;
  const int64_t opt_tensors = optimizer_tensors(probe.optimizer);
  const int64_t per_tensor = opt_tensors > 0 ? state.optimizer / opt_tensors : 0;
  return static_cast<double>(peak - rounded(state.parameters) - rounded(state.gradients) -
                             opt_tensors * rounded(per_tensor));
}

struct Linear {
  double fixed = 0, per_example = 0;
};

Linear measure(const ModelFactory& model, const ProbeOptions& probe,
               Recompute recompute = Recompute::kNone) {
  const double a1 = activation_bytes(model, probe, probe.rows1, recompute);
  const double a2 = activation_bytes(model, probe, probe.rows2, recompute);
  Linear l;
  l.per_example = (a2 - a1) / static_cast<double>(probe.rows2 - probe.rows1);
  l.fixed = a1 - l.per_example * static_cast<double>(probe.rows1);
  return l;
}

void describe_layout(nn::Module& module, ModelProfile& m) {
  const std::vector<Parameter*> all = module.parameters();
  std::map<const Parameter*, int> index;
  for (size_t i = 0; i < all.size(); ++i) {
    index[all[i]] = static_cast<int>(i);
    m.parameter_numel.push_back(all[i]->numel());
  }
  for (const nn::PipelineLayer& layer : module.pipeline_layers()) {
    m.layer_names.push_back(layer.name);
    m.layer_parameters.emplace_back();
    for (const Parameter* p : layer.parameters) m.layer_parameters.back().push_back(index.at(p));
  }
}

// Shares by the parameters each layer holds (tied ones counted on every holder).
void share_by_parameters(ModelProfile& m) {
  double total = 0;
  std::vector<double> sizes;
  for (const auto& layer : m.layer_parameters) {
    double s = 0;
    for (int i : layer) s += static_cast<double>(m.parameter_numel[static_cast<size_t>(i)]);
    sizes.push_back(s);
    total += s;
  }
  for (double s : sizes) m.layer_activation_share.push_back(total > 0 ? s / total : 0);
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

double measure_gemm_flops(Device device, int64_t size) {
  std::unique_ptr<Stream> stream = device_runtime(device).create_stream();
  const Tensor a = Tensor::empty({size, size}, DType::kF32, device);
  const Tensor b = Tensor::empty({size, size}, DType::kF32, device);
  const Tensor c = Tensor::empty({size, size}, DType::kF32, device);
  fill(a, 0.5f, *stream);
  fill(b, 0.25f, *stream);
  matmul(a, false, b, false, c, 1.0f, 0.0f, *stream);  // warm-up
  stream->synchronize();
  const Clock::time_point start = Clock::now();
  const int reps = 3;
  for (int i = 0; i < reps; ++i) matmul(a, false, b, false, c, 1.0f, 0.0f, *stream);
  stream->synchronize();
  return 2.0 * static_cast<double>(size * size * size) * reps / seconds_since(start);
}

double measure_all_reduce_busbw(const std::vector<Device>& devices, int64_t bytes) {
  LS_CHECK(!devices.empty(), "measure_all_reduce_busbw: no devices");
  const size_t count = static_cast<size_t>(bytes / 4);
  const int n = static_cast<int>(devices.size());
  std::vector<std::unique_ptr<Communicator>> comms = make_communicators(devices);
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<Tensor> buffers;
  for (const Device& d : devices) {
    streams.push_back(device_runtime(d).create_stream());
    buffers.push_back(Tensor::empty({static_cast<int64_t>(count)}, DType::kF32, d));
    fill(buffers.back(), 1.0f, *streams.back());
  }
  const auto run = [&](int reps) {  // one thread per rank; the first error is re-thrown
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        const size_t i = static_cast<size_t>(r);
        try {
          for (int k = 0; k < reps; ++k) {
            comms[i]->all_reduce(buffers[i].f32(), buffers[i].f32(), count, DType::kF32,
                                 ReduceOp::kAvg, *streams[i]);
          }
          streams[i]->synchronize();
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  };
  run(1);  // warm-up
  const Clock::time_point start = Clock::now();
  run(3);
  const double seconds = seconds_since(start) / 3;
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  return factor * static_cast<double>(count * 4) / seconds;
}

ModelProfile profile_model(const ModelFactory& model, const ProbeOptions& probe) {
  LS_CHECK(probe.batch != nullptr, "profile_model: the probe needs a batch maker");
  LS_CHECK(probe.rows1 >= 1 && probe.rows2 > probe.rows1, "profile_model: probe rows ", probe.rows1,
           " and ", probe.rows2, "; need 1 <= rows1 < rows2");
  ModelProfile m;
  std::unique_ptr<nn::Module> module = model();  // declares parameters: no device memory
  LS_CHECK(module != nullptr, "profile_model: the model factory returned no model");
  describe_layout(*module, m);
  m.optimizer_floats_per_parameter = optimizer_tensors(probe.optimizer);
  m.train_flops_per_example = probe.train_flops_per_example;
  m.boundary_bytes_per_example = probe.boundary_bytes_per_example;
  m.recompute_flops_per_example = probe.train_flops_per_example * probe.recomputed_flops_share / 3;
  if (!probe.with_layers) {
    const Linear a = measure(model, probe);
    m.activation_fixed_bytes = a.fixed;
    m.activation_bytes_per_example = a.per_example;
    if (probe.probe_recompute) {
      const Linear again = measure(model, probe, Recompute::kBlocks);
      m.recompute_measured = true;
      m.recompute_fixed_bytes = again.fixed;
      m.recompute_bytes_per_example = again.per_example;
    }
    share_by_parameters(m);
    m.activation_source = "measured on " + probe.device.str() + " with the model (rows " +
                          std::to_string(probe.rows1) + " and " + std::to_string(probe.rows2) +
                          "), shared among layers by parameters";
    return m;
  }
  LS_CHECK(probe.layers >= 1, "profile_model: layers is ", probe.layers, "; need at least 1");
  const Linear one = measure(probe.with_layers(1), probe);
  const Linear two = measure(probe.with_layers(2), probe);
  const double block = std::max(0.0, two.per_example - one.per_example);
  const double layers = static_cast<double>(probe.layers);
  m.activation_fixed_bytes = one.fixed + (layers - 1) * (two.fixed - one.fixed);
  m.activation_bytes_per_example = one.per_example + (layers - 1) * block;
  if (probe.probe_recompute) {
    // Each further block adds its saved input; the one recomputed at a time is in one's peak.
    const Linear one_again = measure(probe.with_layers(1), probe, Recompute::kBlocks);
    const Linear two_again = measure(probe.with_layers(2), probe, Recompute::kBlocks);
    m.recompute_measured = true;
    m.recompute_fixed_bytes = one_again.fixed + (layers - 1) * (two_again.fixed - one_again.fixed);
    m.recompute_bytes_per_example =
        one_again.per_example +
        (layers - 1) * std::max(0.0, two_again.per_example - one_again.per_example);
  }
  // Blocks ("h.N") get the per-block bytes; the rest (embeddings, head, loss) goes to the last
  // layer, whose logits dominate it.
  const double rest = std::max(0.0, one.per_example - block);
  for (size_t l = 0; l < m.layer_names.size(); ++l) {
    const bool is_block = m.layer_names[l].rfind("h.", 0) == 0;
    const double bytes = is_block ? block : (l + 1 == m.layer_names.size() ? rest : 0.0);
    m.layer_activation_share.push_back(
        m.activation_bytes_per_example > 0 ? bytes / m.activation_bytes_per_example : 0);
  }
  m.activation_source = "measured on " + probe.device.str() + " with 1- and 2-layer copies (rows " +
                        std::to_string(probe.rows1) + " and " + std::to_string(probe.rows2) +
                        "), extrapolated to " + std::to_string(probe.layers) + " layers";
  return m;
}

}  // namespace ls
