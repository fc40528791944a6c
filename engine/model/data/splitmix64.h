// splitmix64 (Steele, Lea and Flood; the seeding step of java.util.SplittableRandom): a 64-bit
// mixing function, the same on every platform, for the data layer's seeds and fixed splits.
#pragma once

#include <cstdint>

namespace ls::data {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ls::data
