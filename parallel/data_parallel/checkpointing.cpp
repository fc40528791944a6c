// DataParallel's save and load (see lockstep/data_parallel.h), and latest_checkpoint: flat device
// buffers <-> per-parameter safetensors tensors, through engine/checkpoint's crash-safe commit.
// Replica 0's parameters are saved (every replica holds bitwise the same values); optimizer state
// is replica 0's too, or, sharded (ZeRO-1/2), each replica's range put together, so a checkpoint
// holds whole tensors in every mode. A load writes the same host bytes into every replica (each
// sharded optimizer takes its range), so they stay bitwise equal and any mode can load any file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <lockstep/error.h>
#include "engine/model/checkpoint/checkpoint.h"
#include "parallel/runtime/checkpoint_tensors.h"
#include "parallel/data_parallel/data_parallel_impl.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/runtime/step_common.h"

namespace ls {

// Host copies of one replica's flat buffers: values, then each optimizer state in order (declared
// in data_parallel_impl.h).
struct HostState {
  std::vector<Parameter*> parameters;
  std::vector<float> values;
  std::vector<std::pair<std::string, std::vector<float>>> optimizer;
  std::string optimizer_name;
  int64_t optimizer_steps = 0;
  float loss_scale = 1;  // the StepControl's (ops/step_control.h)
  int32_t loss_scale_good_steps = 0;
};

namespace {

using checkpoint::NamedHostTensor;
using checkpoint::SafetensorsDType;

struct LossScaleState {
  float scale;
  int32_t good_steps;
};

// The loss scale a checkpoint saved (its meta's extra fields), or the configured start.
LossScaleState loss_scale_of(const checkpoint::CheckpointMeta& meta,
                             const LossScaleConfig& config) {
  LossScaleState state{config.initial_scale, 0};
  const auto scale = meta.extra.find("loss_scale");
  const auto good = meta.extra.find("loss_scale_good_steps");
  if (scale == meta.extra.end() || good == meta.extra.end()) return state;
  try {
    state.scale = std::stof(scale->second);
    state.good_steps = std::stoi(good->second);
  } catch (const std::exception&) {
    LS_THROW_AS(ErrorKind::kIo, "checkpoint meta: loss_scale '", scale->second,
                "' or loss_scale_good_steps '", good->second, "' is not a number");
  }
  LS_CHECK_IO(std::isfinite(state.scale) && state.scale > 0 && state.good_steps >= 0,
              "checkpoint meta: loss_scale ", state.scale, " / good steps ", state.good_steps,
              " are out of range (a positive scale, a count >= 0)");
  return state;
}

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
  finish_queued();
  HostState state = run_on<HostState>(0, [](Replica& r) {
    HostState s;
    const StepControl control = r.read_control();
    s.loss_scale = control.loss_scale;
    s.loss_scale_good_steps = control.good_steps;
    s.parameters = r.store().parameters();
    s.values = r.store().values_sharded()
                   ? std::vector<float>(static_cast<size_t>(r.store().flat_size()), 0.0f)
                   : r.store().values_to_host(r.compute_stream());
    for (const auto& [name, tensor] : r.optimizer().state()) {
      s.optimizer.emplace_back(name, std::vector<float>(s.values.size(), 0.0f));
    }
    s.optimizer_name = r.optimizer().name();
    s.optimizer_steps = r.optimizer().steps_taken();
    return s;
  });
  // Every local replica's optimizer range (and, ZeRO-3, its range of the values) into the flat
  // state (replica 0 when not sharded).
  const bool sharded = options_.shard != ShardMode::kNone;
  const int holders = sharded ? local_size() : 1;
  int64_t shard_size = 0;
  bool values_sharded = false;
  for (int holder = 0; holder < holders; ++holder) {
    run_on<int>(holder, [&](Replica& r) {
      const auto tensors = r.optimizer().state();
      for (size_t i = 0; i < tensors.size(); ++i) {
        const std::vector<float> part = tensors[i].second.to_host_f32(r.compute_stream());
        std::copy(part.begin(), part.end(),
                  state.optimizer[i].second.begin() + optimizer_offset(r));
      }
      values_sharded = r.store().values_sharded();
      if (values_sharded) {
        const std::vector<float> part = r.store().values_to_host(r.compute_stream());
        std::copy(part.begin(), part.end(), state.values.begin() + optimizer_offset(r));
      }
      shard_size = r.store().shard_size();
      return 0;
    });
  }
  if (sharded && multiprocess()) {
    std::vector<std::vector<float>*> flats;
    for (auto& [name, flat] : state.optimizer) flats.push_back(&flat);
    if (values_sharded) flats.push_back(&state.values);
    gather_ranges(flats, shard_size, "save: gathering the sharded optimizer state");
  }
// Process 0 writes; every process then returns its result or raises its error.
  return processes().on_process_zero([&] { return commit(dir, position, retention, state); },
                                     "save: waiting for process 0 to write the checkpoint (a slow "
                                     "disk needs a longer collective timeout)",
                                     "process 0 could not save the checkpoint: ");
}

// Sharded, several processes: process p holds the ranges of replicas first_replica(p).. of each
// flat vector (one block of the flat layout each); process 0 gathers every block into them.
void DataParallel::Impl::gather_ranges(const std::vector<std::vector<float>*>& flats,
                                       int64_t shard_size, const char* what) {
  const auto block_of = [&](int process) {
    const auto begin = static_cast<size_t>(shard_size * world_->first_replica(process));
    return std::pair{begin, static_cast<size_t>(shard_size * world_->local_device_count(process))};
  };
  std::vector<float> mine;
  const auto [begin, count] = block_of(world_->rank());
  for (const std::vector<float>* flat : flats) {
    mine.insert(mine.end(), flat->begin() + static_cast<std::ptrdiff_t>(begin),
                flat->begin() + static_cast<std::ptrdiff_t>(begin + count));
  }
  const std::vector<std::vector<float>> blocks = between_processes<std::vector<std::vector<float>>>(
      [&] { return mpi::gather_floats(mine, 0, options_.timeout, what, processes().channel()); });
  for (size_t p = 0; p < blocks.size(); ++p) {
    const auto [from, length] = block_of(static_cast<int>(p));
    for (size_t i = 0; i < flats.size(); ++i) {
      const auto part = blocks[p].begin() + static_cast<std::ptrdiff_t>(i * length);
      std::copy(part, part + static_cast<std::ptrdiff_t>(length),
                flats[i]->begin() + static_cast<std::ptrdiff_t>(from));
    }
  }
}

std::string DataParallel::Impl::commit(const std::string& dir, const TrainingPosition& position,
                                       const CheckpointRetention& retention,
                                       const HostState& state) {
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
  if (multiprocess()) meta.extra["world"] = world_->describe();
  meta.extra["skipped_steps"] = std::to_string(skips_.skipped_total());
  meta.extra["precision"] = precision_name(options_.precision);
  if (options_.precision == Precision::kF16) {
    char scale[32];  // %.9g: every float round-trips
    std::snprintf(scale, sizeof scale, "%.9g", static_cast<double>(state.loss_scale));
    meta.extra["loss_scale"] = scale;
    meta.extra["loss_scale_good_steps"] = std::to_string(state.loss_scale_good_steps);
  }
  return checkpoint::commit_checkpoint(dir, meta, model, optimizer, retention);
}

TrainingPosition DataParallel::Impl::load(const std::string& dir) {
  check_usable("load");
  finish_queued();
  // Every process reads DIR itself; all load, or none.
  const checkpoint::LoadedCheckpoint loaded = processes().read_checkpoint(dir);
  HostState state = run_on<HostState>(0, [](Replica& r) {
    HostState s;
    s.parameters = r.store().parameters();
    s.values.assign(static_cast<size_t>(r.store().flat_size()), 0.0f);
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
  // An f16 run resumes at its loss scale (another precision's checkpoint starts f16 afresh).
  const LossScaleState scale = loss_scale_of(loaded.meta, options_.loss_scale);
  run_on_all(
      [&](Replica& r) {
        Stream& stream = r.compute_stream();
        LS_ASSERT(state.values.size() == static_cast<size_t>(r.store().flat_size()),
                  "checkpoint values for a flat layout of ", r.store().flat_size());
        r.store().copy_values_from_host(state.values.data(), stream);
        const auto tensors = r.optimizer().state();
        for (size_t i = 0; i < tensors.size(); ++i) {  // the whole state, or this shard's range
          const float* from = state.optimizer[i].second.data() + optimizer_offset(r);
          tensors[i].second.copy_from_host_async(from, tensors[i].second.nbytes(), stream);
        }
        stream.synchronize();  // the host buffers must outlive the copies
        r.restore_control(loaded.meta.optimizer_steps, scale.scale, scale.good_steps);
      },
      "checkpoint load");
  steps_ = loaded.meta.step;
  return {loaded.meta.epoch, loaded.meta.batch_index};
}

}  // namespace ls
