// DataParallel's save and load (see parallel/data_parallel.h), and latest_checkpoint: flat device buffers
// <-> per-parameter safetensors tensors, through engine/checkpoint's crash-safe commit.
// Replica 0's parameters are saved (every replica holds bitwise the same values); optimizer state
// is replica 0's too, or, sharded (ZeRO-1/2), each replica's range put together, so a checkpoint
// holds whole tensors in every mode. A load writes the same host bytes into every replica (each
// sharded optimizer takes its range), so they stay bitwise equal and any mode can load any file.
#include <algorithm>
#include <cstring>

#include "engine/core/error.h"
#include "engine/model/checkpoint/checkpoint.h"
#include "parallel/checkpoint_tensors.h"
#include "parallel/data_parallel_impl.h"

namespace ls {
namespace {

using checkpoint::NamedHostTensor;
using checkpoint::SafetensorsDType;

// Host copies of one replica's flat buffers: values, then each optimizer state in order.
struct HostState {
  std::vector<Parameter*> parameters;
  std::vector<float> values;
  std::vector<std::pair<std::string, std::vector<float>>> optimizer;
  std::string optimizer_name;
  int64_t optimizer_steps = 0;
};

std::span<const std::byte> bytes_of(const std::vector<float>& flat, const Parameter& p) {
  return std::as_bytes(std::span<const float>(flat).subspan(static_cast<size_t>(p.offset),
                                                           static_cast<size_t>(p.numel())));
}

// Where replica r's optimizer state starts in the flat layout: 0, or its shard's offset.
int64_t optimizer_offset(Replica& r) {
  return r.sharded() ? r.store().shard_size() * r.rank() : 0;
}

std::string model_description(const std::vector<Parameter*>& parameters) {
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  for (const Parameter* p : parameters) {
    names.push_back(p->name);
    shapes.push_back(p->shape);
  }
  return ls::model_description(names, shapes);
}

}  // namespace

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  return checkpoint::latest_checkpoint(dir);
}

std::string DataParallel::Impl::save(const std::string& dir, const TrainingPosition& position,
                                     const CheckpointRetention& retention) {
  check_usable("save");
  HostState state = run_on<HostState>(0, [](Replica& r) {
    HostState s;
    s.parameters = r.store().parameters();
    s.values = r.store().values_to_host(r.compute_stream());
    for (const auto& [name, tensor] : r.optimizer().state()) {
      s.optimizer.emplace_back(name, std::vector<float>(s.values.size(), 0.0f));
    }
    s.optimizer_name = r.optimizer().name();
    s.optimizer_steps = r.optimizer().steps_taken();
    return s;
  });
  // Every replica's optimizer range into the flat state (one replica when it is not sharded).
  const int holders = options_.shard == ShardMode::kNone ? 1 : size();
  for (int holder = 0; holder < holders; ++holder) {
    run_on<int>(holder, [&state](Replica& r) {
      const auto tensors = r.optimizer().state();
      for (size_t i = 0; i < tensors.size(); ++i) {
        const std::vector<float> part = tensors[i].second.to_host_f32(r.compute_stream());
        std::copy(part.begin(), part.end(),
                  state.optimizer[i].second.begin() + optimizer_offset(r));
      }
      return 0;
    });
  }
  std::vector<NamedHostTensor> model, optimizer;
  for (const Parameter* p : state.parameters) {
    model.push_back({p->name, SafetensorsDType::kF32, p->shape, bytes_of(state.values, *p)});
    for (const auto& [name, flat] : state.optimizer) {
      optimizer.push_back(
          {p->name + "." + name, SafetensorsDType::kF32, p->shape, bytes_of(flat, *p)});
    }
  }
  checkpoint::CheckpointMeta meta;
  meta.step = steps_;
  meta.seed = options_.seed;
  meta.epoch = position.epoch;
  meta.batch_index = position.batch_index;
  meta.model = model_description(state.parameters);
  meta.optimizer = state.optimizer_name;
  meta.optimizer_steps = state.optimizer_steps;
  meta.extra["devices"] = devices_str(devices_);
  meta.extra["skipped_steps"] = std::to_string(skipped_total_);
  return checkpoint::commit_checkpoint(dir, meta, model, optimizer, retention);
}

TrainingPosition DataParallel::Impl::load(const std::string& dir) {
  check_usable("load");
  const checkpoint::LoadedCheckpoint loaded = checkpoint::load_checkpoint(dir);
  HostState state = run_on<HostState>(0, [](Replica& r) {
    HostState s;
    s.parameters = r.store().parameters();
    s.values.assign(static_cast<size_t>(r.store().values().numel()), 0.0f);
    for (const auto& [name, tensor] : r.optimizer().state()) {
      s.optimizer.emplace_back(name, std::vector<float>(s.values.size(), 0.0f));
    }
    s.optimizer_name = r.optimizer().name();
    return s;
  });
  check_checkpoint_fits(loaded, state.optimizer_name, state.parameters.size(),
                        state.optimizer.size());
  for (const Parameter* p : state.parameters) {
    restore_tensor(loaded.model, p->name, p->shape, state.values.data() + p->offset);
    for (auto& [name, flat] : state.optimizer)
      restore_tensor(loaded.optimizer, p->name + "." + name, p->shape, flat.data() + p->offset);
  }
  run_on_all(
      [&](Replica& r) {
        Stream& stream = r.compute_stream();
        r.store().values().copy_from_host_async(state.values.data(),
                                                state.values.size() * sizeof(float), stream);
        const auto tensors = r.optimizer().state();
        for (size_t i = 0; i < tensors.size(); ++i) {  // the whole state, or this shard's range
          const float* from = state.optimizer[i].second.data() + optimizer_offset(r);
          tensors[i].second.copy_from_host_async(from, tensors[i].second.nbytes(), stream);
        }
        r.optimizer().set_steps_taken(loaded.meta.optimizer_steps);
        stream.synchronize();  // the host buffers must outlive the copies
      },
      "checkpoint load");
  steps_ = loaded.meta.step;
  return {loaded.meta.epoch, loaded.meta.batch_index};
}

}  // namespace ls
