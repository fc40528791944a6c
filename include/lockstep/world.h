// World: the processes of one training job and the devices each drives. A process started by
// `mpirun` (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE, in its environment) joins the others
// through MPI; any other process is a world of one, through the same class and the same calls.
// Replicas are numbered process-major: process p's local device i is global replica
// first_replica(p) + i, where first_replica(p) is the sum of the device counts of processes < p.
// init() runs once per process (MPI allows one initialisation): every process calls it, with its
// own devices, before anything else uses MPI; finalize() (or a WorldScope going out of scope)
// ends MPI. Thread-safety: init()/finalize() from one thread; the accessors from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/device.h>

namespace ls {

struct WorldOptions {
  // How long init() waits for the other processes to exchange their device counts.
  std::chrono::milliseconds timeout = std::chrono::minutes(2);
};

class World {
 public:
  // Starts MPI when the process was launched by mpirun (MPI_Init_thread), then exchanges every
  // process's local device count (once). Throws when called twice, after finalize() under MPI,
  // with no devices, or under `mpirun -np P>1` in a build without MPI.
  static World& init(std::vector<Device> local_devices, const WorldOptions& options = {});
  static bool initialized();
  static World& current();  // throws before init()
  // Ends every process of the job now (MPI_Abort with `exit_code`; one process: exit), for a
  // program that failed: after printing its error, so that the other processes do not wait
  // for their timeouts (or in MPI_Finalize, which waits for every process). DataParallel and
  // Pipeline already end the others' runs with the original error; this ends the rest.
  [[noreturn]] static void abort_job(int exit_code);
  // Ends MPI (MPI_Finalize) when it was started; a no-op otherwise and when called again.
  // Communicators spanning processes must be destroyed before.
  static void finalize();

  int rank() const { return rank_; }  // this process, 0..size()-1
  int size() const { return size_; }  // processes
  bool uses_mpi() const { return uses_mpi_; }
  const std::string& host_name() const { return host_name_; }
  const std::string& host_name(int process) const;  // as that process's gethostname() says
  const std::vector<Device>& local_devices() const { return local_devices_; }
  int local_device_count(int process) const;
  int first_replica(int process) const;       // global index of process's local device 0
  int global_replica(int local_index) const;  // first_replica(rank()) + local_index
  int replicas() const { return replicas_; }  // devices over all processes
  int process_of_replica(int replica) const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  // "process 1 of 2 on host-a (host:0,host:1 = replicas 2..3 of 4)"
  std::string describe() const;
  // The same processes driving other local devices (lockstep-scale's runs on 1, 2, ... devices
  // per process): every process calls it with its own devices, and the device counts are
  // exchanged again (bounded by timeout()). MPI stays World::init()'s; the result must not
  // outlive the world it came from.
  std::unique_ptr<World> with_local_devices(std::vector<Device> local_devices) const;
  // Whether `flag` is true in any process: lets every process take a decision together (stop
  // after this step when one of them got a signal). Collective: every process calls it, in the
  // same order; bounded by timeout(). One process: returns `flag`.
  bool any_process(bool flag) const;
  // The same, waiting up to `timeout` (for processes that wait while process 0 works alone).
  bool any_process(bool flag, std::chrono::milliseconds timeout) const;

  World(const World&) = delete;
  World& operator=(const World&) = delete;
  ~World() = default;

 private:
  World() = default;
  void set_device_counts(std::vector<int> counts);
  void check_process(int process) const;  // a usage error unless 0 <= process < size()

  int rank_ = 0;
  int size_ = 1;
  bool uses_mpi_ = false;
  std::string host_name_;
  std::vector<Device> local_devices_;
  std::vector<std::string> host_names_;  // of every process
  std::vector<int> counts_;  // local device count of every process
  std::vector<int> firsts_;  // first_replica of every process
  int replicas_ = 0;
  std::chrono::milliseconds timeout_{};
};

// init() on construction, finalize() on destruction: `ls::WorldScope world(devices);` in main.
class WorldScope {
 public:
  explicit WorldScope(std::vector<Device> local_devices, const WorldOptions& options = {})
      : world_(&World::init(std::move(local_devices), options)) {}
  ~WorldScope() { World::finalize(); }
  WorldScope(const WorldScope&) = delete;
  WorldScope& operator=(const WorldScope&) = delete;
  World& operator*() const { return *world_; }
  World* operator->() const { return world_; }

 private:
  World* world_;
};

}  // namespace ls
