// Array f32 -> bf16 rounding (ops/host/bf16_convert.h) equals f32_to_bf16 bit for bit, on the
// CPU's bf16 instruction and on the portable path: random bit patterns of every class, ties,
// subnormals (which the instruction alone would flush), NaN, infinities, and tails of any length.
// Array widening equals bf16_to_f32 on every one of the 65536 bf16 bit patterns.
#include "ops/host/bf16_convert.h"

#include <gtest/gtest.h>
#include <lockstep/dtype.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ls::test {
namespace {

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

std::vector<float> every_kind_of_value() {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               from_bits(0x7f800001u),  // signalling NaN: comes out quiet
                               from_bits(0xffc12345u),
                               std::numeric_limits<float>::max(),  // rounds up to infinity
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::denorm_min(),
                               from_bits(0x00018000u),  // a subnormal that is a bf16 tie
                               -from_bits(0x007fffffu),
                               1.0f + std::ldexp(1.0f, -8),       // tie: to even (1)
                               1.0f + 3 * std::ldexp(1.0f, -8)};  // tie: to even (up)
  std::mt19937 rng(11);
  for (int i = 0; i < 5000; ++i) values.push_back(from_bits(static_cast<uint32_t>(rng())));
  // Subnormals scattered among normal values, so that some blocks of 16 hold one.
  for (int i = 0; i < 200; ++i)
    values.push_back(from_bits(static_cast<uint32_t>(rng()) & 0x807fffffu));
  return values;
}

void expect_exact(void (*round)(const float*, int64_t, uint16_t*), const char* name) {
  const std::vector<float> values = every_kind_of_value();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{33},
                    static_cast<int64_t>(values.size())}) {
    std::vector<uint16_t> out(static_cast<size_t>(n) + 1, 0xabcd);
    round(values.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], 4);
      ASSERT_EQ(out[i], f32_to_bf16(values[i])) << name << ": value bits 0x" << std::hex << bits;
    }
    EXPECT_EQ(out[n], 0xabcd) << name << ": wrote past n=" << n;
  }
}

TEST(Bf16Convert, RoundsEveryValueExactlyAsF32ToBf16) {
  expect_exact(round_to_bf16, "round_to_bf16");
  expect_exact(round_to_bf16_portable, "round_to_bf16_portable");
}

TEST(Bf16Convert, WidensEveryBf16ExactlyAsBf16ToF32) {
  std::vector<uint16_t> every(65536);
  for (size_t i = 0; i < every.size(); ++i) every[i] = static_cast<uint16_t>(i);
  for (const int64_t n : {int64_t{65536}, int64_t{65535}, int64_t{7}}) {  // vector loop and tails
    std::vector<float> out(static_cast<size_t>(n) + 1, 1.5f);
    widen_bf16(every.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const float want = bf16_to_f32(every[i]);
      ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << "bf16 bits 0x" << std::hex << every[i];
    }
    EXPECT_EQ(out[n], 1.5f) << "wrote past n=" << n;
  }
}

}  // namespace
}  // namespace ls::test
