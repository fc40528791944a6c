// The process-wide MPI state World needs, behind an interface that compiles without MPI:
// parallel/mpi/mpi_runtime.cpp implements it with MPI, parallel/mpi/without_mpi.cpp (built when
// CMake finds no MPI) gives a single-process world and clear errors for anything more.
// Every MPI call lockstep makes holds mpi_mutex(), so MPI_THREAD_SERIALIZED would do; init
// requests MPI_THREAD_MULTIPLE so that the application may call MPI from its own threads too.
// Thread-safety: init/finalize from one thread; mpi_mutex() serialises the rest.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/world.h"

namespace ls::mpi {

bool built_with_mpi();
struct Launch {
  int rank = 0;
  int size = 1;
};
// MPI_Init_thread (once per process) and this process's rank and size in MPI_COMM_WORLD.
Launch init();
// Every process's `value`, in process order (a non-blocking allgather, bounded by `timeout`).
std::vector<int> allgather_int(int value, std::chrono::milliseconds timeout);
bool finalized();
void finalize();  // MPI_Finalize; a no-op when MPI was never started or is finalized
std::mutex& mpi_mutex();

}  // namespace ls::mpi

namespace ls {
// Communicators over the host devices of every process of `world` (world.size() > 1):
// parallel/mpi/mpi_host_communicator.h. Collective over the processes: every process calls it.
std::vector<std::unique_ptr<Communicator>> make_mpi_host_communicators(
    const World& world, const CommunicatorOptions& options);
}  // namespace ls
