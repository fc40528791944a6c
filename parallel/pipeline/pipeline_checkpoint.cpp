// Pipeline's save and load (see lockstep/pipeline.h): the same files as DataParallel's
// (parallel/runtime/checkpoint_tensors.h), so either loads the other's. Saving gathers whole
// tensors from pipeline 0's stages in the model's registration order, each tied parameter once
// (from the first stage holding it: every holder keeps bitwise the same values and optimizer state,
// since their summed gradients and updates are identical). Loading gives every stage of every
// pipeline its parameters' tensors, tied copies included.
#include <cstring>

#include <lockstep/clock.h>
#include <lockstep/error.h>
#include "parallel/runtime/checkpoint_tensors.h"
#include "parallel/pipeline/pipeline_impl.h"

namespace ls {
namespace {

using checkpoint::NamedHostTensor;
using checkpoint::SafetensorsDType;

// The whole model's values and optimizer state, one vector per parameter (and state).
struct WholeState {
  std::vector<std::vector<float>> values;             // [parameter]
  std::vector<std::string> state_names;               // e.g. exp_avg, exp_avg_sq
  std::vector<std::vector<std::vector<float>>> state;  // [state][parameter]
  std::string optimizer;
  int64_t optimizer_steps = 0;
};

std::vector<float> slice(const std::vector<float>& flat, const Parameter& p) {
  const auto begin = flat.begin() + static_cast<std::ptrdiff_t>(p.offset);
  return std::vector<float>(begin, begin + p.numel());
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) {
  return std::as_bytes(std::span<const float>(v));
}

}  // namespace

std::string Pipeline::Impl::save(const std::string& dir, const TrainingPosition& position,
                                 const CheckpointRetention& retention) {
  group_->check_usable("save");
  meter_->interrupt();  // not a step: the gap before the next one is not idle
  // Process 0 writes (its first pipeline holds the whole model); every process returns its
  // result or raises its error.
  return processes().on_process_zero([&] { return commit(dir, position, retention); },
                                     "save: waiting for process 0 to write the checkpoint (a slow "
                                     "disk needs a longer collective timeout)",
                                     "process 0 could not save the checkpoint: ");
}

std::string Pipeline::Impl::commit(const std::string& dir, const TrainingPosition& position,
                                   const CheckpointRetention& retention) {
  const size_t count = parameter_names_.size();
  WholeState whole;
  whole.values.resize(count);
  for (int s = 0; s < options_.stages; ++s) {  // pipeline 0
    run_on(s, [&](PipelineStage& stage) {
      Stream& stream = stage.compute_stream();
      const std::vector<float> values = stage.store().values_to_host(stream);
      const auto states = stage.optimizer().state();
      if (whole.state_names.empty()) {
        for (const auto& [name, tensor] : states) whole.state_names.push_back(name);
        whole.state.assign(states.size(), std::vector<std::vector<float>>(count));
        whole.optimizer = stage.optimizer().name();
        whole.optimizer_steps = stage.optimizer().steps_taken();
      }
      std::vector<std::vector<float>> flat_states;
      for (const auto& [name, tensor] : states) flat_states.push_back(tensor.to_host_f32(stream));
      const auto& params = stage.store().parameters();
      for (size_t j = 0; j < params.size(); ++j) {
        const auto k = static_cast<size_t>(stage.model_indices()[j]);
        if (!whole.values[k].empty()) continue;  // a tied parameter, saved by an earlier stage
        whole.values[k] = slice(values, *params[j]);
        for (size_t i = 0; i < flat_states.size(); ++i) {
          whole.state[i][k] = slice(flat_states[i], *params[j]);
        }
      }
    });
  }
  std::vector<NamedHostTensor> model, optimizer;
  std::vector<Shape> shapes;
  for (size_t k = 0; k < count; ++k) {
    const Shape shape(parameter_shapes_[k].begin(), parameter_shapes_[k].end());
    shapes.push_back(shape);
    model.push_back(
        {parameter_names_[k], SafetensorsDType::kF32, shape, bytes_of(whole.values[k])});
    for (size_t i = 0; i < whole.state_names.size(); ++i) {
      optimizer.push_back({parameter_names_[k] + "." + whole.state_names[i],
                           SafetensorsDType::kF32, shape, bytes_of(whole.state[i][k])});
    }
  }
  checkpoint::CheckpointMeta meta;
  meta.step = steps_;
  meta.seed = options_.seed;
  meta.epoch = position.epoch;
  meta.batch_index = position.batch_index;
  meta.model = model_description(parameter_names_, shapes);
  meta.optimizer = whole.optimizer;
  meta.optimizer_steps = whole.optimizer_steps;
  meta.extra["devices"] = devices_str(devices_);
  if (group_->several_processes()) meta.extra["world"] = world_->describe();
  meta.extra["pipeline_stages"] = std::to_string(options_.stages);
  return checkpoint::commit_checkpoint(dir, meta, model, optimizer, retention);
}

TrainingPosition Pipeline::Impl::load(const std::string& dir) {
  group_->check_usable("load");
  meter_->interrupt();
  // Every process reads DIR itself; all load, or none.
  const checkpoint::LoadedCheckpoint loaded = processes().read_checkpoint(dir);
  std::string optimizer;
  size_t states = 0;
  run_on(0, [&](PipelineStage& stage) {
    optimizer = stage.optimizer().name();
    states = stage.optimizer().state().size();
  });
  check_checkpoint_fits(loaded, optimizer, parameter_names_.size(), states);
  run_on_stages(
      [&](size_t, PipelineStage& stage) {
        Stream& stream = stage.compute_stream();
        const size_t flat = static_cast<size_t>(stage.store().flat_size());
        std::vector<float> values(flat, 0.0f);
        const auto tensors = stage.optimizer().state();
        std::vector<std::vector<float>> state(tensors.size(), std::vector<float>(flat, 0.0f));
        const auto& params = stage.store().parameters();
        for (size_t j = 0; j < params.size(); ++j) {
          const auto k = static_cast<size_t>(stage.model_indices()[j]);
          const Parameter& p = *params[j];
          restore_tensor(loaded.model, parameter_names_[k], p.shape, values.data() + p.offset);
          for (size_t i = 0; i < tensors.size(); ++i) {
            restore_tensor(loaded.optimizer, parameter_names_[k] + "." + tensors[i].first, p.shape,
                           state[i].data() + p.offset);
          }
        }
        stage.store().copy_values_from_host(values.data(), stream);
        for (size_t i = 0; i < tensors.size(); ++i) {
          tensors[i].second.copy_from_host_async(state[i].data(), flat * sizeof(float), stream);
        }
        stage.optimizer().set_steps_taken(loaded.meta.optimizer_steps);
        stream.synchronize();  // the host buffers must outlive the copies
      },
      "checkpoint load");
  steps_ = loaded.meta.step;
  return {loaded.meta.epoch, loaded.meta.batch_index};
}

std::string Pipeline::save(const std::string& dir, const TrainingPosition& position,
                           const CheckpointRetention& retention) {
  const int64_t begin = steady_now_ns();
  std::string committed = impl_->save(dir, position, retention);
  impl_->trace_span(kCallerThread, "checkpoint save", begin, steady_now_ns());
  return committed;
}
TrainingPosition Pipeline::load(const std::string& dir) { return impl_->load(dir); }

}  // namespace ls
