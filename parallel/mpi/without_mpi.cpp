// Compiled instead of parallel/mpi/*.cpp when CMake finds no MPI: a World is then one process,
// and a launch by `mpirun -np P` (P > 1) is refused with how to get an MPI build.
#include <mutex>

#include <lockstep/error.h>
#include "parallel/mpi/mpi_runtime.h"

namespace ls::mpi {

bool built_with_mpi() { return false; }

Launch init() {
  LS_THROW(
      "this process was started by mpirun with several processes, but lockstep was built "
      "without MPI; install Open MPI (scripts/setup installs libopenmpi-dev and openmpi-bin) "
      "and reconfigure, so that CMake's find_package(MPI) finds it");
}

std::vector<int> allgather_int(int value, std::chrono::milliseconds, const char*,
                               FailureChannel*) {
  return {value};
}
std::vector<double> allgather_doubles(std::span<const double> mine, std::chrono::milliseconds,
                                      const char*, FailureChannel*) {
  return {mine.begin(), mine.end()};
}
std::vector<std::vector<float>> gather_floats(std::span<const float> mine, int,
                                              std::chrono::milliseconds, const char*,
                                              FailureChannel*) {
  return {std::vector<float>(mine.begin(), mine.end())};
}
std::vector<std::string> allgather_string(const std::string& text, std::chrono::milliseconds,
                                          const char*, FailureChannel*) {
  return {text};
}
std::string broadcast_string(const std::string& text, int, std::chrono::milliseconds, const char*,
                             FailureChannel*) {
  return text;
}
struct FailureChannel::State {};
FailureChannel::FailureChannel() = default;
FailureChannel::~FailureChannel() = default;
void FailureChannel::post(ErrorKind, const std::string&) {}
std::optional<FailureNotice> FailureChannel::notice() noexcept { return std::nullopt; }
bool finalized() { return false; }
void finalize() {}
void abort(int) {}
std::mutex& mpi_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace ls::mpi

namespace ls {

std::vector<std::unique_ptr<Communicator>> make_mpi_host_communicators(const World& world,
                                                                       const CommunicatorOptions&) {
  LS_THROW("communicators across ", world.size(),
           " processes need MPI, but lockstep was built "
           "without it; install Open MPI (scripts/setup) and reconfigure");
}

}  // namespace ls
