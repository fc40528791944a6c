// Helpers shared by the checkpoint tests: a per-test temporary directory, byte-buffer helpers,
// and EXPECT_THROW_WITH (the ls::Error message must contain every given fragment).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <lockstep/error.h>

namespace ls::checkpoint::testing {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

inline Bytes to_bytes(std::string_view s) {
  Bytes out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());  // memcpy(nullptr, ...) is UB
  return out;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

inline Bytes read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return to_bytes(s);
}

inline void write_all(const fs::path& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// The message of the ls::Error `fn` raises ("" and a test failure if it raises none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "expected an ls::Error";
  return "";
}

inline ::testing::AssertionResult contains_all(const std::string& message,
                                               std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) {
    if (message.find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "message \"" << message << "\" lacks \"" << p << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

#define EXPECT_THROW_WITH(stmt, ...)                   \
  EXPECT_TRUE(::ls::checkpoint::testing::contains_all( \
      ::ls::checkpoint::testing::error_of([&] { stmt; }), {__VA_ARGS__}))

// The step directories (step-NNNNNN) in a checkpoint directory, sorted by name.
inline std::vector<std::string> step_dir_names(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with("step-"))
      out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Gives each test its own empty directory, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::temp_directory_path() / ("lockstep-ckpt-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace ls::checkpoint::testing
