// The process-wide MPI state that parallel/mpi/*.cpp share (internal; includes <mpi.h>):
// the communicators lockstep makes at init, and the graveyard.
//
// Why a graveyard: a non-blocking MPI call given up on (a timeout, another process's failure)
// cannot be cancelled if it is a collective, and MPI may still write into its receive buffers
// whenever it progresses. Those buffers, and the request, are moved here and kept until
// MPI_Finalize, instead of being freed under MPI. The exchanges' communicator is then out of
// step between the processes (the abandoned call may match a later one), so it is marked
// poisoned and every later exchange fails at once with the reason.
// Thread-safety: every member is guarded by mpi_mutex().
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

namespace ls::mpi {

struct State {
  MPI_Comm notices = MPI_COMM_NULL;    // FailureChannel's (a dup of MPI_COMM_WORLD)
  MPI_Comm exchanges = MPI_COMM_NULL;  // the process collectives' (another dup)
  int next_notice_tag = 1;
  std::string poisoned;  // why `exchanges` can no longer be matched; "" while it can
  std::vector<std::shared_ptr<void>> graveyard;
};
State& state();

// Keeps `buffers` (whatever an abandoned request may still write into) until finalize().
// Caller holds mpi_mutex().
inline void bury(std::shared_ptr<void> buffers) { state().graveyard.push_back(std::move(buffers)); }

}  // namespace ls::mpi
