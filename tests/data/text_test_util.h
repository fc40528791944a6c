// Helpers shared by the text-data tests: error text capture, fixture paths, temporary files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <lockstep/error.h>
#include "tests/ops/op_test_util.h"

namespace ls::data::testing {

// The shared error helpers of the op tests.
using ls::test::contains;
using ls::test::error_of;

inline std::string fixture(const std::string& name) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/tests/data/fixtures/" + name;
}

// Gives each test its own empty directory, removed afterwards; write() makes a file in it.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("ls_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    std::filesystem::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    EXPECT_TRUE(out.good()) << path;
    return path.string();
  }

  std::filesystem::path dir_;
};

}  // namespace ls::data::testing
