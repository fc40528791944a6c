// The collective benchmarks' harness (see bench/micro/collective_harness.h).
#include "bench/micro/collective_harness.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "parallel/runtime/worker_thread.h"

namespace ls::bench {
namespace {

using Clock = std::chrono::steady_clock;

// 8 B to 8 MiB in x4 steps, then x2 to 256 MiB, so that the headline sizes (16 and 64 MiB)
// are measured.
std::vector<size_t> nominal_sizes() {
  std::vector<size_t> sizes;
  for (size_t bytes = 8; bytes <= (8u << 20); bytes *= 4) sizes.push_back(bytes);
  for (size_t bytes = 16u << 20; bytes <= (256u << 20); bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

// Collectives per timed iteration: 20 for small sizes (as nccl-tests' default), fewer as they
// grow, so that per-iteration dispatch does not hide small-message time.
int ops_per_iteration(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((16u << 20) / std::max<size_t>(bytes, 1), 1, 20));
}

// N ranks: a thread, a stream and a communicator each, plus the buffers of the last collective
// and size run on them.
class RankGroup {
 public:
  explicit RankGroup(std::vector<Device> devices) : devices_(std::move(devices)) {
    CommunicatorOptions options;
    options.timeout = std::chrono::seconds(120);  // a broken collective fails instead of hanging
    comms_ = make_communicators(devices_, options);
    streams_.resize(devices_.size());
    buffers_.resize(devices_.size());
    for (const Device& device : devices_) {
      threads_.push_back(std::make_unique<WorkerThread>("benchmark rank on " + device.str()));
    }
    run([this](int r) {
      DeviceRuntime& runtime = device_runtime(devices_[static_cast<size_t>(r)]);
      runtime.bind_current_thread();
      streams_[static_cast<size_t>(r)] = runtime.create_stream();
    });
  }

  ~RankGroup() {
    buffers_.clear();
    comms_.clear();
    streams_.clear();
    threads_.clear();
  }

  int size() const { return static_cast<int>(devices_.size()); }
  Communicator& comm(int r) { return *comms_[static_cast<size_t>(r)]; }
  Stream& stream(int r) { return *streams_[static_cast<size_t>(r)]; }

  // Runs job(r) on every rank's thread at once and waits for all. A rank that throws aborts the
  // communicators (so its peers leave their collectives), and the first error is rethrown.
  void run(const std::function<void(int)>& job) {
    std::vector<std::future<void>> done;
    done.reserve(threads_.size());
    for (int r = 0; r < size(); ++r) {
      done.push_back(threads_[static_cast<size_t>(r)]->post([this, &job, r] {
        try {
          job(r);
        } catch (...) {
          if (!comms_.empty()) comm(r).abort();
          throw;
        }
      }));
    }
    std::exception_ptr first;
    for (auto& f : done) {
      try {
        f.get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

  // Makes every rank's buffers fit `layout` for collective `def`, (re)filling send only when
  // they change, and fills every recv with a sentinel that no correct answer contains.
  void prepare(const CollectiveDef& def, const CollectiveLayout& layout) {
    const bool same = def.kind == kind_ && layout.send_count == held_.send_count &&
                      layout.recv_count == held_.recv_count;
    run([&](int r) {
      const auto ur = static_cast<size_t>(r);
      const Device device = devices_[ur];
      Buffers& b = buffers_[ur];
      std::vector<float> staging;
      if (!same) {
        b = {};  // back to the allocator's cache, and from there to the system:
        device_runtime(device).allocator().release_cached();
        b.send = Tensor::empty({static_cast<int64_t>(layout.send_count)}, DType::kF32, device);
        b.recv = Tensor::empty({static_cast<int64_t>(layout.recv_count)}, DType::kF32, device);
        staging.resize(layout.send_count);
        def.fill_send(staging.data(), layout, r, size());
        b.send.copy_from_host_async(staging.data(), staging.size() * sizeof(float), stream(r));
        stream(r).synchronize();
      }
      staging.assign(layout.recv_count, -1.0f);
      b.recv.copy_from_host_async(staging.data(), staging.size() * sizeof(float), stream(r));
      stream(r).synchronize();
    });
    kind_ = def.kind;
    held_ = layout;
  }

  // Every rank issues `ops` collectives, then waits for its stream.
  void issue(const CollectiveDef& def, const CollectiveLayout& layout, int ops) {
    run([&](int r) {
      Buffers& b = buffers_[static_cast<size_t>(r)];
      for (int i = 0; i < ops; ++i)
        def.issue(comm(r), b.send.f32(), b.recv.f32(), layout, stream(r));
      stream(r).synchronize();
    });
  }

  size_t count_wrong(const CollectiveDef& def, const CollectiveLayout& layout) {
    std::atomic<size_t> wrong{0};
    run([&](int r) {
      const std::vector<float> recv = buffers_[static_cast<size_t>(r)].recv.to_host_f32(stream(r));
      wrong += def.count_wrong(recv.data(), layout, r, size());
    });
    return wrong.load();
  }

 private:
  struct Buffers {
    Tensor send, recv;
  };

  std::vector<Device> devices_;
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<Buffers> buffers_;
  CollectiveKind kind_ = CollectiveKind::kAllReduce;
  CollectiveLayout held_;
};

std::map<std::string, std::unique_ptr<RankGroup>>& rank_groups() {
  static std::map<std::string, std::unique_ptr<RankGroup>> groups;
  return groups;
}

RankGroup& rank_group(const std::vector<Device>& devices) {
  std::unique_ptr<RankGroup>& group = rank_groups()[devices_str(devices)];
  if (!group) group = std::make_unique<RankGroup>(devices);
  return *group;
}

void run_collective(benchmark::State& state, const CollectiveDef& def,
                    const std::vector<Device>& devices, size_t nominal_bytes) {
  const int n = static_cast<int>(devices.size());
  const CollectiveLayout layout = def.layout(nominal_bytes / sizeof(float), n);
  const int ops = ops_per_iteration(layout.bytes);
  double seconds = 0;
  size_t wrong = 0;
  try {
    RankGroup& group = rank_group(devices);
    group.prepare(def, layout);
    group.issue(def, layout, 1);  // warm-up: first touch of the recv pages, lazy set-up
    for (auto _ : state) {
      const auto start = Clock::now();
      group.issue(def, layout, ops);
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      state.SetIterationTime(elapsed);
      seconds += elapsed;
    }
    wrong = group.count_wrong(def, layout);
  } catch (const std::exception& e) {
    rank_groups().erase(devices_str(devices));  // aborted: the next benchmark makes a new one
    state.SkipWithError(e.what());
    return;
  }
  const double time_s = seconds / (static_cast<double>(state.iterations()) * ops);
  const double algbw = static_cast<double>(layout.bytes) / time_s / 1e9;
  state.counters["size"] = static_cast<double>(layout.bytes);
  state.counters["count"] = static_cast<double>(layout.bytes / sizeof(float));
  state.counters["time_us"] = time_s * 1e6;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * def.bus_factor(n);
  state.counters["wrong"] = static_cast<double>(wrong);
  state.SetLabel("f32 ops/iter=" + std::to_string(ops));
}

void register_on(const CollectiveDef& def, std::string_view backend,
                 const std::vector<Device>& devices) {
  for (int n = 1; n <= static_cast<int>(devices.size()); ++n) {
    const std::vector<Device> ranks = first_devices(devices, n);
    for (const size_t bytes : nominal_sizes()) {
      const std::string name = std::string(collective_name(def.kind)) + "/" + std::string(backend) +
                               "/devices:" + std::to_string(n) + "/bytes:" + std::to_string(bytes);
      benchmark::RegisterBenchmark(name.c_str(), [&def, ranks, bytes](benchmark::State& state) {
        run_collective(state, def, ranks, bytes);
      })->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

void register_collective(const CollectiveDef& def, const BenchConfig& config) {
  std::vector<Device> host;
  for (int i = 0; i < config.host_ranks; ++i) host.push_back({DeviceKind::kHost, i});
  register_on(def, "host", host);
  if (!config.cuda_devices.empty()) register_on(def, "cuda", config.cuda_devices);
}

void release_rank_groups() { rank_groups().clear(); }

}  // namespace ls::bench
