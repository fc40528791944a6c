// Shared by the MPI test program's files: the world the program runs in, and Group, the
// communicators of every local device with one stream each, whose run() calls a function on
// every local replica from its own thread (as replicas do) and rethrows the first error.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "engine/core/runtime.h"
#include "parallel/comm/communicator.h"
#include <lockstep/world.h>
#include "parallel/runtime/world_communicators.h"

namespace ls::mpi_test {

struct Group {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Stream>> streams;

  explicit Group(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const World& world = World::current();
    comms = make_world_communicators(world, CommunicatorOptions{timeout});
    for (const Device& d : world.local_devices())
      streams.push_back(device_runtime(d).create_stream());
  }
  int local() const { return static_cast<int>(comms.size()); }

  // fn(local index, communicator, stream) on each local replica's thread, then its stream's
  // synchronize(); the errors, one per local replica (null when it succeeded).
  std::vector<std::exception_ptr> run(const std::function<void(int, Communicator&, Stream&)>& fn) {
    std::vector<std::exception_ptr> errors(comms.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < comms.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          fn(static_cast<int>(i), *comms[i], *streams[i]);
          streams[i]->synchronize();
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return errors;
  }
};

}  // namespace ls::mpi_test
