// Device-spec parsing and its errors.
#include <lockstep/device.h>

#include <gtest/gtest.h>

#include <lockstep/error.h>

namespace ls {
namespace {

std::string error_of(std::string_view spec) {
  try {
    parse_devices(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceSpec, HostCounts) {
  auto devices = parse_devices("host:3");
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[2], (Device{DeviceKind::kHost, 2}));
  EXPECT_EQ(devices_str(devices), "host:0,host:1,host:2");
  EXPECT_EQ(parse_devices("host").size(), static_cast<size_t>(host_core_count()));
}

TEST(DeviceSpec, AutoPicksGpusElseOneHostDevicePerCore) {
  auto devices = parse_devices("auto");
  if (cuda_availability().device_count > 0) {
    EXPECT_TRUE(devices[0].is_cuda());
    EXPECT_EQ(devices.size(), static_cast<size_t>(cuda_availability().device_count));
  } else {
    EXPECT_EQ(devices.size(), static_cast<size_t>(host_core_count()));
    EXPECT_TRUE(devices[0].is_host());
  }
}

TEST(DeviceSpec, BadSpecsSayWhatIsWrong) {
  EXPECT_NE(error_of("host:0").find("N >= 1"), std::string::npos);
  EXPECT_NE(error_of("host:x").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("host:").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("gpu").find("unknown device spec"), std::string::npos);
  EXPECT_NE(error_of("host:-2").find("N >= 1"), std::string::npos);
}

TEST(DeviceSpec, CudaWithoutGpuExplainsWhy) {
  CudaAvailability cuda = cuda_availability();
  if (cuda.device_count > 0) {
    EXPECT_NE(error_of("cuda:0,0").find("twice"), std::string::npos);
    EXPECT_NE(error_of("cuda:99").find("does not exist"), std::string::npos);
    return;
  }
  EXPECT_FALSE(cuda.reason_unavailable.empty());
  const std::string message = error_of("cuda");
  EXPECT_NE(message.find("none is usable"), std::string::npos);
  EXPECT_NE(message.find(cuda.reason_unavailable), std::string::npos);
  EXPECT_NE(error_of("cuda:0,2").find("none is usable"), std::string::npos);
}

TEST(DeviceSpec, Names) {
  EXPECT_EQ((Device{DeviceKind::kCuda, 1}).str(), "cuda:1");
  EXPECT_EQ((Device{DeviceKind::kHost, 0}).str(), "host:0");
}

}  // namespace
}  // namespace ls
