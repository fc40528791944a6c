// A process that dies of a fatal signal while a DataParallel is alive writes its flight recorder
// first (parallel/observability/fatal_signal_dump.h): stderr names the file, the file holds every
// replica with the reason "fatal signal", and the process still dies of that signal.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <lockstep/data_parallel.h>
#include "parallel/random_batch.h"

namespace ls {
namespace {

namespace fs = std::filesystem;

TEST(FatalSignalDeathTest, AnAbortWritesTheFlightRecorderAndStillAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the trainer runs threads
  // The dying child is this binary run again: it names the folder after its parent, this process.
  const auto folder_of = [](pid_t test) {
    return (fs::temp_directory_path() / ("lockstep-fatal-" + std::to_string(test))).string();
  };
  const std::string dir = folder_of(getpid());
  fs::remove_all(dir);
  EXPECT_EXIT(
      {
        DataParallelOptions options;
        options.flight_recorder_dir = folder_of(getppid());
        DataParallel dp({Device{DeviceKind::kHost, 0}, Device{DeviceKind::kHost, 1}},
                        mlp_factory({8, 16, 10}), make_optimizer_factory({"sgd", 0.1f}), options);
        dp.step(testing::random_batch(8, 8, 1));
        std::abort();
      },
      ::testing::KilledBySignal(SIGABRT),
      "fatal signal 6.*the flight recorder is in .*lockstep-flight-");
  int files = 0;
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("\"reason\": \"fatal signal\""), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("\"device\": \"host:1\""), std::string::npos) << text.str();
    ++files;
  }
  EXPECT_EQ(files, 1);
  fs::remove_all(dir);
}

TEST(FatalSignal, NoTrainerLeavesTheHandlersAsTheyWere) {
  struct sigaction before {};
  sigaction(SIGSEGV, nullptr, &before);
  {
    DataParallel dp({Device{DeviceKind::kHost, 0}}, mlp_factory({8, 16, 10}),
                    make_optimizer_factory({"sgd", 0.1f}));
    struct sigaction during {};
    sigaction(SIGSEGV, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);  // lockstep's, while a trainer lives
  }
  struct sigaction after {};
  sigaction(SIGSEGV, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
}

}  // namespace
}  // namespace ls
