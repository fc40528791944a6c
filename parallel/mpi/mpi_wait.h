// Bounded waits on MPI requests, and the check every MPI call goes through. Only the files
// compiled with MPI include this (it includes <mpi.h>).
// wait_all polls MPI_Testall (each test holding mpi_mutex(), so threads never call MPI at once)
// until every request completed, the deadline passed or stop() said so: an MPI wait in lockstep
// is bounded and abortable like every other wait. On kTimeout/kStopped the requests are still
// pending; the caller cancels them (receives) or gives them up.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>

namespace ls::mpi {

using Clock = std::chrono::steady_clock;

enum class WaitEnd { kDone, kTimeout, kStopped };

WaitEnd wait_all(MPI_Request* requests, int count, Clock::time_point deadline,
                 const std::function<bool()>& stop);

// Throws an internal ls::Error naming `what` and MPI's error string when rc != MPI_SUCCESS.
void check(int rc, const char* what);

}  // namespace ls::mpi
