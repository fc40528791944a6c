// lockstep-doctor's checks across the processes of `mpirun -np P lockstep-doctor ...` (P > 1):
// every process describes its build and devices (ProcessFacts), the descriptions are exchanged,
// and every process compares them all with process 0 (the same findings everywhere, so every
// process takes the same decisions); then a known-answer all-reduce over every replica of every
// process through make_world_communicators. The exchanges are composed of World's bounded MPI
// collectives (mpi::broadcast_string), so a process that dies or stops makes the others fail
// with a timeout, never hang. main.cpp runs them; the comparisons are pure functions, tested on
// fixture facts (tests/doctor/world_checks_test.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "engine/core/system_info.h"
#include <lockstep/world.h>
#include "tools/doctor/finding.h"

namespace ls::doctor {

// What one process says about itself.
struct ProcessFacts {
  int process = 0;
  std::string host;
  std::string version;  // lockstep's, "0.1.0"
  std::string build;    // "CUDA runtime 13.0, NCCL 2.28.3, MPI" or "host only (no CUDA), MPI"
  std::string kind;     // "cuda" or "host": the kind of its devices
  std::string devices;  // "cuda:0,cuda:1"
  int device_count = 0;
  int first_replica = 0;
  std::vector<std::string> gpu_bus_ids;  // its GPUs' PCI bus ids ("" when unknown), device order
  std::string name() const;              // "p1 (host-b)": how findings name the process
  int gpu_count() const { return kind == "cuda" ? device_count : 0; }
};

// This process's facts; `report` gives the versions and bus ids.
ProcessFacts facts_of_this_process(const World& world, const GpuReport& report);

// Every process against process 0, one finding per problem, each naming the process and host:
//   world-version  lockstep version differs (FAIL)
//   world-build    CUDA runtime / NCCL / MPI build differs (FAIL)
//   world-devices  device kind differs (FAIL); device count differs (WARN: supported, but
//                  usually a GPU missing on one machine)
//   world-gpus     two processes on one host drive the same GPU (FAIL: NCCL cannot)
// and one OK finding per check when nothing differs (world-gpus only when there are GPUs).
Findings check_world_facts(const std::vector<ProcessFacts>& facts);

// A known-answer all-reduce over every replica of every process, each local replica on its own
// thread (as allreduce_check.h, through make_world_communicators). Collective: every process
// calls it. The finding is this process's: its replicas' results, or why they failed.
Finding known_answer_world_all_reduce(const World& world, std::chrono::milliseconds timeout,
                                      bool* hung);

// How long the local checks (main.cpp's diagnose) may take on a process with `gpus` GPUs: the
// bounded waits they are made of, added up, plus a minute for NVML, sysfs and the kernel log.
std::chrono::milliseconds local_checks_limit(int gpus, std::chrono::milliseconds timeout);

// Every process's `mine`, in process order (mpi::allgather_string), bounded by `timeout`.
// Collective; `what` names it in a timeout's message.
std::vector<std::string> exchange_strings(const World& world, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          const std::string& what);

// Facts and findings as one string and back, to move them between processes (length-prefixed
// fields, so any text survives). decode_* throw ls::Error on a malformed string.
std::string encode_facts(const ProcessFacts& facts);
ProcessFacts decode_facts(const std::string& text);
std::string encode_findings(const Findings& findings);
Findings decode_findings(const std::string& text);

}  // namespace ls::doctor
