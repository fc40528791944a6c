// lockstep-mpi-allreduce: host all-reduce busbw across processes (the hierarchical communicator
// of parallel/mpi/) against, in the same run, the in-process host communicator over the same
// total number of host devices (process 0 alone, the others wait) and memcpy on process 0.
// Run: mpirun -np 2 --allow-run-as-root --oversubscribe lockstep-mpi-allreduce [local devices]
// Columns as every lockstep collective benchmark: size count dtype time_us algbw busbw #wrong
// (busbw = algbw * 2(n-1)/n, nccl-tests' definition; #wrong counts elements != the exact sum).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/core/runtime.h"
#include "parallel/comm/communicator.h"
#include <lockstep/world.h>
#include "parallel/runtime/world_communicators.h"

namespace {

using namespace ls;
using Clock = std::chrono::steady_clock;

struct Result {
  double seconds;  // per all-reduce
  long wrong;
};

// `iters` out-of-place f32 sums on every replica of `comms`; replica g sends g + 1 everywhere.
Result time_all_reduce(std::vector<std::unique_ptr<Communicator>>& comms, size_t count, int iters) {
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::vector<float>> send(comms.size()), recv(comms.size());
  for (size_t i = 0; i < comms.size(); ++i) {
    streams.push_back(device_runtime(comms[i]->device()).create_stream());
    send[i].assign(count, static_cast<float>(comms[i]->rank() + 1));
    recv[i].assign(count, 0.0f);
  }
  auto run = [&](int n) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([&, i] {
        for (int k = 0; k < n; ++k) {
          comms[i]->all_reduce(send[i].data(), recv[i].data(), count, DType::kF32, ReduceOp::kSum,
                               *streams[i]);
        }
        streams[i]->synchronize();
      });
    }
    for (std::thread& t : threads) t.join();
  };
  run(2);  // warm-up
  const auto start = Clock::now();
  run(iters);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  const int n = comms.front()->size();
  const float expected = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;
  long wrong = 0;
  for (const auto& r : recv) {
    for (float x : r) wrong += x != expected;
  }
  return {seconds, wrong};
}

// A barrier that sleeps while it waits: the processes waiting for process 0's in-process run
// must leave the cores to it (MPI_Barrier spins, and would halve what it measures).
void idle_barrier() {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; MPI_Test(&request, &done, MPI_STATUS_IGNORE), !done;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void print(const char* what, size_t bytes, int n, Result r) {
  const double algbw = static_cast<double>(bytes) / r.seconds / 1e9;
  std::printf("%-14s %10zu %10zu f32 %10.1f %7.2f %7.2f %ld\n", what, bytes, bytes / 4,
              r.seconds * 1e6, algbw, algbw * 2.0 * (n - 1) / n, r.wrong);
}

}  // namespace

int main(int argc, char** argv) {
  const int local = argc > 1 ? std::atoi(argv[1]) : 1;
  std::vector<Device> devices;
  for (int i = 0; i < local; ++i) devices.push_back({DeviceKind::kHost, i});
  WorldScope world(devices);
  const int n = world->replicas();
  if (world->rank() == 0) {
    std::printf("# %d processes x %d host devices = %d replicas; in-process: process 0 alone "
                "with %d host devices\n# what size count dtype time_us algbw busbw #wrong\n",
                world->size(), local, n, n);
  }
  for (size_t bytes : {size_t{1} << 16, size_t{1} << 20, size_t{1} << 24}) {
    const int iters = bytes >= (size_t{1} << 24) ? 10 : 50;
    if (world->rank() == 0) {
      std::vector<Device> all;
      for (int i = 0; i < n; ++i) all.push_back({DeviceKind::kHost, i});
      auto comms = make_communicators(all, CommunicatorOptions{std::chrono::seconds(60)});
      print("in-process", bytes, n, time_all_reduce(comms, bytes / 4, iters));
      std::vector<char> a(bytes, 1), b(bytes);
      const auto start = Clock::now();
      for (int k = 0; k < iters; ++k) std::memcpy(b.data(), a.data(), bytes);
      const double t = std::chrono::duration<double>(Clock::now() - start).count() / iters;
      std::printf("%-14s %10zu %10s  -  %10.1f %7.2f %7s -\n", "memcpy", bytes, "-", t * 1e6,
                  static_cast<double>(bytes) / t / 1e9, "-");
    }
    idle_barrier();
    auto comms = make_world_communicators(*world, CommunicatorOptions{std::chrono::seconds(60)});
    const Result r = time_all_reduce(comms, bytes / 4, iters);
    if (world->rank() == 0) print("cross-process", bytes, n, r);
  }
  return 0;
}
