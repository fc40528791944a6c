// The host communicator: every collective with rank-derived inputs and exact expected values
// (1..8 ranks, counts 0..2^20+3, f32 and bf16, in place and out of place, sum/avg/max),
// determinism, more ranks than cores, desync, timeout, abort, sticky failure, bad arguments.
// Each rank issues its calls from its own thread on its own stream, as replicas do.
#include "parallel/host/host_communicator.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "engine/core/runtime.h"
#include "parallel/comm/communicator.h"

namespace ls {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

std::vector<Device> host_devices(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back({DeviceKind::kHost, i});
  return devices;
}

// N communicators and one stream per rank. Tests never wait forever: 10 s timeout by default.
struct Clique {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Stream>> streams;

  explicit Clique(int n, CommunicatorOptions options = {10s}) {
    const std::vector<Device> devices = host_devices(n);
    comms = make_host_communicators(devices, options);
    for (const Device& d : devices) streams.push_back(device_runtime(d).create_stream());
  }
  int size() const { return static_cast<int>(comms.size()); }
  Communicator& comm(int r) { return *comms[static_cast<size_t>(r)]; }
  HostCommunicator& host(int r) { return dynamic_cast<HostCommunicator&>(comm(r)); }
  Stream& stream(int r) { return *streams[static_cast<size_t>(r)]; }
};

// Runs body(rank) on one thread per rank, then synchronizes that rank's stream. Returns the
// message of the ls::Error each rank saw ("" for none); their kinds go to `kinds` when given.
std::vector<std::string> run_ranks(Clique& clique, const std::function<void(int)>& body,
                                   std::vector<ErrorKind>* kinds = nullptr) {
  std::vector<std::string> errors(static_cast<size_t>(clique.size()));
  if (kinds != nullptr) kinds->assign(errors.size(), ErrorKind::kInternal);
  std::vector<std::thread> threads;
  for (int r = 0; r < clique.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
        clique.stream(r).synchronize();
      } catch (const Error& e) {
        errors[static_cast<size_t>(r)] = e.message();
        if (kinds != nullptr) (*kinds)[static_cast<size_t>(r)] = e.kind();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::string("not an ls::Error: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// ---- element types: rank-derived inputs whose f32 sums are exact --------------------------

template <typename T>
struct Elem;

template <>
struct Elem<float> {
  static constexpr DType kDType = DType::kF32;
  // Integers below 2^14 in magnitude; the rank holding the max changes with i.
  static float value(int r, size_t i) {
    return static_cast<float>(
        static_cast<int>(((static_cast<size_t>(r) * 7 + i) % 13) * 1000 + i % 977) - 6000);
  }
  static float encode(float x) { return x; }
  static float decode(float x) { return x; }
};

template <>
struct Elem<uint16_t> {
  static constexpr DType kDType = DType::kBF16;
  // Multiples of 1/4 in [-16, 16): 7 significant bits, exact in bf16.
  static float value(int r, size_t i) {
    return static_cast<float>(static_cast<int>((static_cast<size_t>(r) * 37 + i) % 128) - 64) *
           0.25f;
  }
  static uint16_t encode(float x) { return f32_to_bf16(x); }
  static float decode(uint16_t x) { return bf16_to_f32(x); }
};

template <typename T>
std::vector<T> inputs_of(int rank, size_t n) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = Elem<T>::encode(Elem<T>::value(rank, i));
  return out;
}

// Expected reductions over ranks 0..n-1 of value(k, i), i < len: the f32 fold, rounded once.
template <typename T>
std::vector<T> expected_reduce(int n, size_t len, ReduceOp op) {
  std::vector<T> out(len);
  for (size_t i = 0; i < len; ++i) {
    float acc = Elem<T>::value(0, i);
    for (int k = 1; k < n; ++k) {
      const float x = Elem<T>::value(k, i);
      acc = op == ReduceOp::kMax ? std::max(acc, x) : acc + x;
    }
    if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
    out[i] = Elem<T>::encode(acc);
  }
  return out;
}

// "" when got[0..n) == want[0..n) bitwise, else the first difference.
template <typename T>
std::string compare(const T* got, const T* want, size_t n, const std::string& what) {
  if (n == 0 || std::memcmp(got, want, n * sizeof(T)) == 0) return "";
  size_t i = 0;
  while (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) ++i;
  return what + ": element " + std::to_string(i) + " is " +
         std::to_string(Elem<T>::decode(got[i])) + ", expected " +
         std::to_string(Elem<T>::decode(want[i]));
}

// ---- every collective, every op, exact values --------------------------------------------

using CaseParam = std::tuple<int, size_t, DType, bool>;  // ranks, count, dtype, in place

class HostCollective : public ::testing::TestWithParam<CaseParam> {};

// One rank's buffers for: all_reduce x3 ops, reduce_scatter x3 ops, all_gather, broadcast,
// reduce x3 ops (its out-of-place input is ar_in).
template <typename T>
struct RankBuffers {
  std::vector<T> ar_in, rs_in, ag_in, bc_in;  // out-of-place inputs (shared by the three ops)
  std::vector<T> ar[3], rs[3], ag, bc, rd[3];  // recv (in place: also the input)
};

template <typename T>
void run_every_collective(int n, size_t count, bool in_place) {
  const DType dtype = Elem<T>::kDType;
  const size_t c = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);  // per rank
  const size_t total = c * static_cast<size_t>(n);  // reduce_scatter input, all_gather output
  const int root = n / 2;
  const T sentinel = Elem<T>::encode(NAN);
  std::vector<std::vector<T>> want(3);
  for (int o = 0; o < 3; ++o) {
    want[static_cast<size_t>(o)] = expected_reduce<T>(n, std::max(count, total), kOps[o]);
  }

  Clique clique(n);
  std::vector<std::string> mismatch(static_cast<size_t>(n));
  const auto errors = run_ranks(clique, [&](int r) {
    RankBuffers<T> b;
    const auto ur = static_cast<size_t>(r);
    b.ar_in = inputs_of<T>(r, count);
    b.rs_in = inputs_of<T>(r, total);
    b.ag_in = inputs_of<T>(r, c);
    b.bc_in = r == root ? inputs_of<T>(r, count) : std::vector<T>(count, sentinel);
    for (int o = 0; o < 3; ++o) {
      b.ar[o] = in_place ? b.ar_in : std::vector<T>(count, sentinel);
      b.rs[o] = in_place ? b.rs_in : std::vector<T>(c, sentinel);
      b.rd[o] = in_place ? b.ar_in : std::vector<T>(count, sentinel);
    }
    b.ag.assign(total, sentinel);
    if (in_place) {
      std::copy(b.ag_in.begin(), b.ag_in.end(), b.ag.begin() + static_cast<ptrdiff_t>(ur * c));
    }
    b.bc = in_place ? b.bc_in : std::vector<T>(count, sentinel);

    Communicator& comm = clique.comm(r);
    Stream& s = clique.stream(r);
    for (int o = 0; o < 3; ++o) {
      comm.all_reduce(in_place ? b.ar[o].data() : b.ar_in.data(), b.ar[o].data(), count, dtype,
                      kOps[o], s);
    }
    for (int o = 0; o < 3; ++o) {
      comm.reduce_scatter(in_place ? b.rs[o].data() : b.rs_in.data(),
                          in_place ? b.rs[o].data() + ur * c : b.rs[o].data(), c, dtype, kOps[o],
                          s);
    }
    comm.all_gather(in_place ? b.ag.data() + ur * c : b.ag_in.data(), b.ag.data(), c, dtype, s);
    comm.broadcast(in_place ? b.bc.data() : b.bc_in.data(), b.bc.data(), count, dtype, root, s);
    for (int o = 0; o < 3; ++o) {
      comm.reduce(in_place ? b.rd[o].data() : b.ar_in.data(), b.rd[o].data(), count, dtype,
                  kOps[o], root, s);
    }
    s.synchronize();

    std::string& bad = mismatch[ur];
    for (int o = 0; o < 3 && bad.empty(); ++o) {
      const std::string op(reduce_op_name(kOps[o]));
      bad = compare(b.ar[o].data(), want[o].data(), count, "all_reduce " + op);
      if (bad.empty()) {
        const T* got = in_place ? b.rs[o].data() + ur * c : b.rs[o].data();
        bad = compare(got, want[o].data() + ur * c, c, "reduce_scatter " + op);
      }
    }
    for (int k = 0; k < n && bad.empty(); ++k) {
      bad = compare(b.ag.data() + static_cast<size_t>(k) * c, inputs_of<T>(k, c).data(), c,
                    "all_gather block " + std::to_string(k));
    }
    if (bad.empty()) {
      bad = compare(b.bc.data(), inputs_of<T>(root, count).data(), count, "broadcast");
    }
    for (int o = 0; o < 3 && bad.empty(); ++o) {  // the root gets the result; the others keep theirs
      const std::string op(reduce_op_name(kOps[o]));
      const std::vector<T> untouched = in_place ? inputs_of<T>(r, count)
                                                : std::vector<T>(count, sentinel);
      bad = compare(b.rd[o].data(), r == root ? want[o].data() : untouched.data(), count,
                    "reduce " + op + (r == root ? " on the root" : " off the root"));
    }
    if (bad.empty() && !in_place) {  // out of place: the inputs are left alone
      bad = compare(b.ar_in.data(), inputs_of<T>(r, count).data(), count, "all_reduce send");
      if (bad.empty()) {
        bad = compare(b.rs_in.data(), inputs_of<T>(r, total).data(), total, "reduce_scatter send");
      }
    }
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(mismatch[static_cast<size_t>(r)], "") << "rank " << r;
    EXPECT_EQ(clique.host(r).issued(), 11);
    EXPECT_EQ(clique.host(r).completed(), 11);
  }
}

TEST_P(HostCollective, ExactResults) {
  const auto [ranks, count, dtype, in_place] = GetParam();
  if (dtype == DType::kF32) {
    run_every_collective<float>(ranks, count, in_place);
  } else {
    run_every_collective<uint16_t>(ranks, count, in_place);
  }
}

INSTANTIATE_TEST_SUITE_P(Exact, HostCollective,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{7},
                                                              size_t{1000}, size_t{(1 << 20) + 3}),
                                            ::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<CaseParam>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param))) +
                                  (std::get<3>(info.param) ? "_inplace" : "_outofplace");
                         });

// ---- determinism ---------------------------------------------------------------------------

// Random inputs (inexact sums): the result is the f32 fold over ranks 0..n-1, bitwise, twice.
template <typename T>
void check_deterministic(int n, size_t count) {
  std::vector<std::vector<T>> inputs(static_cast<size_t>(n));
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (auto& in : inputs) {
    in.resize(count);
    for (auto& x : in) x = Elem<T>::encode(dist(rng));
  }
  std::vector<T> reference(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = Elem<T>::decode(inputs[0][i]);
    for (int k = 1; k < n; ++k) acc += Elem<T>::decode(inputs[static_cast<size_t>(k)][i]);
    reference[i] = Elem<T>::encode(acc);
  }
  std::vector<std::vector<T>> first;
  for (int run = 0; run < 2; ++run) {
    Clique clique(n);
    std::vector<std::vector<T>> out(static_cast<size_t>(n), std::vector<T>(count));
    const auto errors = run_ranks(clique, [&](int r) {
      const auto ur = static_cast<size_t>(r);
      clique.comm(r).all_reduce(inputs[ur].data(), out[ur].data(), count, Elem<T>::kDType,
                                ReduceOp::kSum, clique.stream(r));
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(errors[static_cast<size_t>(r)], "");
      EXPECT_EQ(compare(out[static_cast<size_t>(r)].data(), reference.data(), count, "fold"), "")
          << "run " << run << " rank " << r;
    }
    if (run == 0) first = out;
    EXPECT_EQ(first, out);
  }
}

TEST(HostCommunicator, DeterministicFixedRankOrder) {
  check_deterministic<float>(3, 100003);
  check_deterministic<uint16_t>(5, 100003);
}

// ---- more ranks than cores -----------------------------------------------------------------

TEST(HostCommunicator, MoreRanksThanCoresMakeProgress) {
  // Streams are made on a thread limited to 2 cores; their workers inherit the affinity.
  constexpr int kRanks = 8, kIterations = 300, kCount = 7;
  std::unique_ptr<Clique> clique;
  std::thread maker([&] {
    cpu_set_t allowed, two;
    CPU_ZERO(&two);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
      for (int cpu = 0, picked = 0; cpu < CPU_SETSIZE && picked < 2; ++cpu) {
        if (CPU_ISSET(cpu, &allowed)) {
          CPU_SET(cpu, &two);
          ++picked;
        }
      }
      sched_setaffinity(0, sizeof(two), &two);
    }
    clique = std::make_unique<Clique>(kRanks);
  });
  maker.join();
  std::vector<std::vector<float>> bufs(kRanks, std::vector<float>(kIterations * kCount));
  const auto start = Clock::now();
  const auto errors = run_ranks(*clique, [&](int r) {
    auto& buf = bufs[static_cast<size_t>(r)];
    for (int j = 0; j < kIterations * kCount; ++j)
      buf[static_cast<size_t>(j)] = static_cast<float>(r * 1000 + j);
    for (int j = 0; j < kIterations; ++j) {
      float* p = buf.data() + j * kCount;
      clique->comm(r).all_reduce(p, p, kCount, DType::kF32, ReduceOp::kSum, clique->stream(r));
    }
  });
  EXPECT_LT(Clock::now() - start, 5s);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(errors[static_cast<size_t>(r)], "");
    for (int j = 0; j < kIterations * kCount; ++j) {
      ASSERT_EQ(bufs[static_cast<size_t>(r)][static_cast<size_t>(j)], 28000.0f + 8.0f * j);
    }
  }
}

// ---- failures: desync, timeout, abort, sticky ----------------------------------------------

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(HostCommunicator, DesyncIsReportedOnEveryRankAndTouchesNoMemory) {
  Clique clique(3);
  std::vector<std::vector<float>> recv(3, std::vector<float>(1000, -1.0f));
  const std::vector<float> send(1000, 1.0f);
  std::vector<ErrorKind> kinds;
  const auto errors = run_ranks(
      clique,
      [&](int r) {
        const size_t count = r == 1 ? 999 : 1000;
        clique.comm(r).all_reduce(send.data(), recv[static_cast<size_t>(r)].data(), count,
                                  DType::kF32, ReduceOp::kSum, clique.stream(r));
      },
      &kinds);
  for (int r = 0; r < 3; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(e, "desync at #1")) << e;
    EXPECT_TRUE(contains(e, "rank 0 issued all_reduce #1 (3.9 KiB) [f32, count=1000, sum]")) << e;
    EXPECT_TRUE(contains(e, "rank 1 issued all_reduce #1 (3.9 KiB) [f32, count=999, sum]")) << e;
    EXPECT_EQ(kinds[static_cast<size_t>(r)], ErrorKind::kDesync);
    EXPECT_EQ(recv[static_cast<size_t>(r)], std::vector<float>(1000, -1.0f));
    EXPECT_EQ(clique.host(r).completed(), 0);
  }
}

TEST(HostCommunicator, SkippedCallIsADesyncNotAHang) {
  // Rank 1 skips the first all_reduce: its broadcast meets rank 0's all_reduce.
  Clique clique(2);
  std::vector<std::vector<float>> buf(2, std::vector<float>(16, 1.0f));
  const auto errors = run_ranks(clique, [&](int r) {
    float* p = buf[static_cast<size_t>(r)].data();
    if (r == 0) clique.comm(r).all_reduce(p, p, 16, DType::kF32, ReduceOp::kSum, clique.stream(r));
    clique.comm(r).broadcast(p, p, 16, DType::kF32, 0, clique.stream(r));
  });
  for (const std::string& e : errors) {
    EXPECT_TRUE(contains(e,
                         "rank 0 issued all_reduce #1 (64 B) [f32, count=16, sum] but rank 1 "
                         "issued broadcast #1 (64 B) [f32, count=16, root=0]"))
        << e;
  }
}

TEST(HostCommunicator, ZeroCountIsStillACollective) {
  Clique clique(2);
  std::vector<float> buf(5, 1.0f);
  auto errors = run_ranks(clique, [&](int r) {
    clique.comm(r).all_reduce(nullptr, nullptr, 0, DType::kF32, ReduceOp::kSum, clique.stream(r));
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(clique.host(1).completed(), 1);
  errors = run_ranks(clique, [&](int r) {
    std::vector<float> mine(buf);
    clique.comm(r).all_reduce(mine.data(), mine.data(), r == 0 ? 0 : 5, DType::kF32, ReduceOp::kSum,
                              clique.stream(r));
    clique.stream(r).synchronize();
  });
  EXPECT_TRUE(contains(errors[0], "count=0")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "count=5")) << errors[1];
}

TEST(HostCommunicator, TimeoutNamesTheMissingRankAndFailureIsSticky) {
  Clique clique(3, CommunicatorOptions{200ms});
  std::vector<float> buf(64, 1.0f);
  const auto start = Clock::now();
  std::vector<ErrorKind> kinds;
  const auto errors = run_ranks(
      clique,
      [&](int r) {
        if (r == 1) return;  // never calls
        std::vector<float> mine(buf);
        clique.comm(r).all_reduce(mine.data(), mine.data(), mine.size(), DType::kF32,
                                  ReduceOp::kSum, clique.stream(r));
        clique.stream(r).synchronize();
      },
      &kinds);
  EXPECT_LT(Clock::now() - start, 1500ms);
  for (int r : {0, 2}) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_TRUE(contains(e,
                         "timeout after 200 ms in all_reduce #1 (256 B) [f32, count=64, sum]: "
                         "ranks 0, 2 arrived, rank 1 did not (its last completed collective is "
                         "none and it has not issued #1"))
        << e;
    EXPECT_EQ(kinds[static_cast<size_t>(r)], ErrorKind::kTimeout);
  }
  EXPECT_TRUE(contains(clique.host(1).last_failure(), "rank 1 did not"));
  // Sticky: every later call throws at once, on every rank, without waiting.
  const auto later = Clock::now();
  for (int r = 0; r < 3; ++r) {
    EXPECT_THROW(clique.comm(r).all_reduce(buf.data(), buf.data(), buf.size(), DType::kF32,
                                           ReduceOp::kSum, clique.stream(r)),
                 Error);
  }
  EXPECT_LT(Clock::now() - later, 1s);  // the calls threw; nothing waited
  EXPECT_EQ(clique.host(1).issued(), 0);
}

TEST(HostCommunicator, TimeoutTellsABusyStreamFromAMissingCall) {
  Clique clique(2, CommunicatorOptions{200ms});
  std::atomic<bool> release{false};
  host_enqueue(clique.stream(1), [&] {  // rank 1's stream is stuck on earlier work
    while (!release) std::this_thread::sleep_for(1ms);
  });
  std::vector<std::vector<float>> buf(2, std::vector<float>(8, 1.0f));
  for (int r = 0; r < 2; ++r) {
    float* p = buf[static_cast<size_t>(r)].data();
    clique.comm(r).all_reduce(p, p, 8, DType::kF32, ReduceOp::kSum, clique.stream(r));
  }
  try {
    clique.stream(0).synchronize();
    ADD_FAILURE() << "no timeout";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.message(),
                         "rank 1 did not (its last completed collective is none and "
                         "it has issued #1 but its stream has not run it"))
        << e.message();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  }
  release = true;
  EXPECT_THROW(clique.stream(1).synchronize(), Error);  // reaches it later: fails at once
}

TEST(HostCommunicator, AbortFromAnotherThreadEndsABlockedCollective) {
  Clique clique(2, CommunicatorOptions{60s});
  std::vector<float> buf(64, 1.0f);
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    clique.comm(1).abort();
  });
  const auto start = Clock::now();
  clique.comm(0).all_reduce(buf.data(), buf.data(), buf.size(), DType::kF32, ReduceOp::kSum,
                            clique.stream(0));
  clique.comm(0).all_reduce(buf.data(), buf.data(), buf.size(), DType::kF32, ReduceOp::kSum,
                            clique.stream(0));  // pending behind the blocked one
  try {
    clique.stream(0).synchronize();
    ADD_FAILURE() << "synchronize() returned after abort";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.message(), "aborted")) << e.message();
    EXPECT_EQ(e.kind(), ErrorKind::kAborted);
  }
  aborter.join();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(buf, std::vector<float>(64, 1.0f));
  EXPECT_TRUE(contains(clique.host(0).last_failure(), "aborted"));
  for (int r = 0; r < 2; ++r) {
    try {
      clique.comm(r).broadcast(buf.data(), buf.data(), 1, DType::kF32, 0, clique.stream(r));
      ADD_FAILURE() << "a collective was issued on an aborted clique";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.message(), "aborted")) << e.message();
      EXPECT_EQ(e.kind(), ErrorKind::kAborted);  // the stored failure keeps its kind
    }
  }
}

TEST(HostCommunicator, OneRankOnTwoUnorderedStreamsIsAnError) {
  Clique clique(2);
  auto other = device_runtime(Device{DeviceKind::kHost, 0}).create_stream();
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  clique.comm(0).all_reduce(a.data(), a.data(), 4, DType::kF32, ReduceOp::kSum, clique.stream(0));
  std::this_thread::sleep_for(50ms);  // #1 is waiting for rank 1 on stream 0
  clique.comm(0).broadcast(b.data(), b.data(), 4, DType::kF32, 0, *other);
  for (Stream* s : {&clique.stream(0), other.get()}) {
    try {
      s->synchronize();
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.message(),
                           "rank 0 started broadcast #2 (16 B) [f32, count=4, root=0] while its "
                           "all_reduce #1 (16 B) [f32, count=4, sum] was still running"))
          << e.message();
    }
  }
  EXPECT_EQ(a, std::vector<float>(4, 1.0f));
}

// ---- groups, counters, arguments -------------------------------------------------------------

TEST(HostCommunicator, GroupsBalanceAndCallsInsideRunInOrder) {
  Clique clique(2);
  std::vector<std::vector<float>> buf(2, std::vector<float>(10));
  const auto errors = run_ranks(clique, [&](int r) {
    auto& b = buf[static_cast<size_t>(r)];
    std::fill(b.begin(), b.end(), static_cast<float>(r + 1));
    Communicator& comm = clique.comm(r);
    comm.group_start();
    comm.group_start();
    comm.all_reduce(b.data(), b.data(), 5, DType::kF32, ReduceOp::kSum, clique.stream(r));
    comm.group_end();
    comm.all_reduce(b.data() + 5, b.data() + 5, 5, DType::kF32, ReduceOp::kMax, clique.stream(r));
    comm.group_end();
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(buf[static_cast<size_t>(r)], (std::vector<float>{3, 3, 3, 3, 3, 2, 2, 2, 2, 2}));
    EXPECT_EQ(clique.host(r).issued(), 2);
    EXPECT_EQ(clique.host(r).completed(), 2);
  }
  EXPECT_THROW(clique.comm(0).group_end(), Error);
}

void expect_error(const std::function<void()>& call, const std::string& part) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.message(), part)) << e.message();
  }
}

TEST(HostCommunicator, BadArgumentsAreRejectedAtTheCall) {
  Clique clique(2);
  Communicator& comm = clique.comm(0);
  Stream& s = clique.stream(0);
  std::vector<float> buf(16);
  expect_error([&] { comm.all_reduce(nullptr, buf.data(), 4, DType::kF32, ReduceOp::kSum, s); },
               "must be non-null");
  expect_error([&] { comm.all_gather(buf.data(), nullptr, 4, DType::kF32, s); },
               "must be non-null");
  expect_error([&] { comm.broadcast(buf.data(), buf.data(), 4, DType::kF32, 2, s); },
               "root 2 is out of range");
  expect_error([&] { comm.broadcast(buf.data(), buf.data(), 4, DType::kF32, -1, s); },
               "root -1 is out of range");
  expect_error([&] { comm.all_reduce(buf.data(), buf.data(), 4, DType::kI32, ReduceOp::kSum, s); },
               "dtype i32");
  expect_error(
      [&] {
        comm.all_reduce(buf.data(), buf.data(), 4, DType::kF32, ReduceOp::kSum, clique.stream(1));
      },
      "the stream belongs to host:1");
  expect_error(
      [&] { comm.all_reduce(buf.data(), buf.data() + 2, 4, DType::kF32, ReduceOp::kSum, s); },
      "overlap");
  expect_error(
      [&] { comm.reduce_scatter(buf.data(), buf.data() + 1, 4, DType::kF32, ReduceOp::kSum, s); },
      "in place means recv == send + 0 * recv_count");
  expect_error([&] { comm.group_end(); }, "without a matching group_start()");
  EXPECT_EQ(clique.host(0).issued(), 0);  // nothing was enqueued

  expect_error([] { make_host_communicators({}, {}); }, "no devices");
  expect_error(
      [] {
        make_host_communicators({{DeviceKind::kHost, 0}, {DeviceKind::kHost, 0}}, {});
      },
      "listed twice");
  expect_error(
      [] {
        make_host_communicators({{DeviceKind::kHost, 0}, {DeviceKind::kCuda, 0}}, {});
      },
      "not a host device");
  expect_error(
      [] {
        make_host_communicators({{DeviceKind::kHost, 0}}, CommunicatorOptions{0ms});
      },
      "timeout must be positive");
}

TEST(HostCommunicator, BroadcastIgnoresSendOffTheRoot) {
  Clique clique(2);
  std::vector<std::vector<float>> recv(2, std::vector<float>(3, 0.0f));
  const std::vector<float> send{1, 2, 3};
  const auto errors = run_ranks(clique, [&](int r) {  // as in NCCL, a non-root may pass null
    clique.comm(r).broadcast(r == 1 ? send.data() : nullptr, recv[static_cast<size_t>(r)].data(), 3,
                             DType::kF32, 1, clique.stream(r));
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(recv[0], send);
  EXPECT_EQ(recv[1], send);
}

TEST(HostCommunicator, DescribesItself) {
  Clique clique(3);
  EXPECT_EQ(clique.comm(2).rank(), 2);
  EXPECT_EQ(clique.comm(2).size(), 3);
  EXPECT_EQ(clique.comm(2).device(), (Device{DeviceKind::kHost, 2}));
  EXPECT_EQ(clique.comm(2).backend(), "host");
  EXPECT_EQ(reduce_op_name(ReduceOp::kSum), "sum");
  EXPECT_EQ(reduce_op_name(ReduceOp::kAvg), "avg");
  EXPECT_EQ(reduce_op_name(ReduceOp::kMax), "max");
  EXPECT_EQ(collective_name(CollectiveKind::kAllReduce), "all_reduce");
  EXPECT_EQ(collective_name(CollectiveKind::kReduceScatter), "reduce_scatter");
  EXPECT_EQ(collective_name(CollectiveKind::kAllGather), "all_gather");
  EXPECT_EQ(collective_name(CollectiveKind::kBroadcast), "broadcast");
  EXPECT_EQ(collective_name(CollectiveKind::kReduce), "reduce");
}

TEST(HostCommunicator, ReduceWritesTheRootOnlyAndChecksTheRoot) {
  Clique clique(3);
  std::vector<std::vector<float>> send{{1, 2}, {10, 20}, {100, 200}};
  std::vector<float> root_recv(2, -1.0f);
  const auto errors = run_ranks(clique, [&](int r) {  // as in NCCL, a non-root may pass null
    clique.comm(r).reduce(send[static_cast<size_t>(r)].data(), r == 2 ? root_recv.data() : nullptr,
                          2, DType::kF32, ReduceOp::kSum, 2, clique.stream(r));
  });
  EXPECT_EQ(errors, (std::vector<std::string>{"", "", ""}));
  EXPECT_EQ(root_recv, (std::vector<float>{111, 222}));
  float x = 0;
  try {
    clique.comm(0).reduce(&x, &x, 1, DType::kF32, ReduceOp::kSum, 3, clique.stream(0));
    ADD_FAILURE() << "root 3 of 3 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("reduce: root 3 is out of range; the clique has 3 ranks (0..2)"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace ls
