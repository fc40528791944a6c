// The NCCL communicator on this machine's GPUs: every collective with rank-derived inputs and
// exact expected values (1..n ranks, counts 0..2^20+3, f32 and bf16, in place and out of place,
// sum/avg/max), grouped calls (per rank, and one thread spanning every rank), abort from another
// thread, argument errors, a missing peer, teardown and re-creation. Each rank issues its calls
// from its own thread (bound to its GPU) on its own stream, as replicas do; a watchdog aborts a
// test that hangs. GPU tests skip without a GPU. The device-list checks run everywhere, also in
// builds without CUDA: make_nccl_communicators rejects bad lists before any CUDA call.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/dtype.h>
#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "parallel/comm/communicator.h"

namespace ls {
namespace {

using namespace std::chrono_literals;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
constexpr size_t kCounts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Device cuda(int index) { return {DeviceKind::kCuda, index}; }

std::vector<Device> cuda_devices(int n) {
  std::vector<Device> devices;
  for (int i = 0; i < n; ++i) devices.push_back(cuda(i));
  return devices;
}

// The message of the ls::Error that fn throws (its kind to `kind` when given); a test failure and
// "" when it throws none.
template <typename Fn>
std::string error_of(Fn&& fn, ErrorKind* kind = nullptr) {
  try {
    fn();
  } catch (const Error& e) {
    if (kind != nullptr) *kind = e.kind();
    return e.message();
  }
  ADD_FAILURE() << "expected an ls::Error";
  return "";
}

// ---- bad device lists: checked before any CUDA call, so these run everywhere --------------

// The NCCL communicator is built (its own device checks run); not in a build without CUDA, nor
// in the CPU emulator's (LOCKSTEP_CUDA=EMULATED), which has parallel/nccl/without_nccl.cpp.
#ifdef LOCKSTEP_CUDA_EMULATED
const bool kRealNccl = false;
#else
const bool kRealNccl = built_with_cuda();
#endif

TEST(NcclCommunicatorDevices, RejectsAHostDevice) {
  const std::string message = error_of([] {
    make_nccl_communicators({{DeviceKind::kHost, 0}}, CommunicatorOptions{});
  });
  EXPECT_TRUE(contains(message, "host:0")) << message;
  if (kRealNccl) {
    EXPECT_TRUE(contains(message, "not a CUDA device")) << message;
  }
}

TEST(NcclCommunicatorDevices, RejectsADuplicateDevice) {
  const std::string message = error_of([] {
    make_nccl_communicators({cuda(0), cuda(0)}, CommunicatorOptions{});
  });
  EXPECT_TRUE(contains(message, "cuda:0")) << message;
  if (kRealNccl) {
    EXPECT_TRUE(contains(message, "listed twice")) << message;
  }
}

TEST(NcclCommunicatorDevices, RejectsAnEmptyListAndAMissingDevice) {
  EXPECT_THROW(make_nccl_communicators({}, CommunicatorOptions{}), Error);
  // Without a GPU: "no CUDA device"; with one: "cuda:4096 does not exist".
  const std::string message = error_of([] {
    make_nccl_communicators({cuda(4096)}, CommunicatorOptions{});
  });
  EXPECT_TRUE(contains(message, "cuda:4096")) << message;
}

// ---- harness: a clique, one stream per rank, one thread per rank -------------------------

// The communicators of GPUs 0..n-1 and one stream per rank, each made on the rank's own thread
// after binding it to the rank's GPU.
struct Clique {
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Stream>> streams;

  explicit Clique(int n, CommunicatorOptions options = CommunicatorOptions{60s}) {
    comms = make_nccl_communicators(cuda_devices(n), options);
    streams.resize(static_cast<size_t>(n));
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          DeviceRuntime& runtime = device_runtime(cuda(r));
          runtime.bind_current_thread();
          streams[static_cast<size_t>(r)] = runtime.create_stream();
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const std::string& e : errors) {
      if (!e.empty()) throw std::runtime_error("stream creation failed: " + e);
    }
  }
  int size() const { return static_cast<int>(comms.size()); }
  Communicator& comm(int r) { return *comms[static_cast<size_t>(r)]; }
  Stream& stream(int r) { return *streams[static_cast<size_t>(r)]; }
};

struct RunResult {
  std::vector<std::string> errors;  // each rank's ls::Error message, "" for none
  bool watchdog_fired = false;
};

// Runs body(rank, barrier) on one thread per rank, bound to the rank's GPU, then synchronizes the
// rank's stream. The barrier separates phases (allocate and upload before any collective: a
// cudaMalloc while a peer's NCCL kernel waits can deadlock). A rank that fails drops out of the
// barrier so its peers go on. If the ranks are not done within `limit`, a watchdog aborts the
// communicators and the streams, so a hang fails the test instead of freezing the suite.
RunResult run_ranks(Clique& clique, const std::function<void(int, std::barrier<>&)>& body,
                    std::chrono::milliseconds limit = 120s) {
  const int n = clique.size();
  RunResult result;
  result.errors.resize(static_cast<size_t>(n));
  std::barrier<> sync(n);
  std::mutex mutex;
  std::condition_variable finished;
  int done = 0;
  std::thread watchdog([&] {
    std::unique_lock lock(mutex);
    if (finished.wait_for(lock, limit, [&] { return done == n; })) return;
    result.watchdog_fired = true;
    lock.unlock();
    clique.comm(0).abort();
    for (auto& s : clique.streams) s->abort();
  });
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::string& error = result.errors[static_cast<size_t>(r)];
      try {
        device_runtime(cuda(r)).bind_current_thread();
        body(r, sync);
        clique.stream(r).synchronize();
      } catch (const Error& e) {
        error = e.message();
      } catch (const std::exception& e) {
        error = std::string("not an ls::Error: ") + e.what();
      }
      if (!error.empty()) sync.arrive_and_drop();
      std::lock_guard lock(mutex);
      if (++done == n) finished.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  watchdog.join();
  return result;
}

void expect_no_errors(const RunResult& run) {
  EXPECT_FALSE(run.watchdog_fired) << "the ranks hung and were aborted by the watchdog";
  for (size_t r = 0; r < run.errors.size(); ++r) EXPECT_EQ(run.errors[r], "") << "rank " << r;
}

// ---- element types: rank-derived inputs whose reductions NCCL computes exactly ------------

template <typename T>
struct Elem;

template <>
struct Elem<float> {
  static constexpr DType kDType = DType::kF32;
  // Integers below 2^14 in magnitude, so every partial sum is exact; the max moves between ranks.
  static float value(int r, size_t i) {
    return static_cast<float>(static_cast<int>(((static_cast<size_t>(r) * 7 + i) % 13) * 1000 +
                                               i % 977) - 6000);
  }
  static float encode(float x) { return x; }
  static float decode(float x) { return x; }
  static constexpr float kAvgTolerance = 0.01f;  // per rank, see expected_reduce
};

template <>
struct Elem<uint16_t> {
  static constexpr DType kDType = DType::kBF16;
  // Integers in [-8, 8]. NCCL rounds every partial bf16 sum, but for up to 32 ranks each one is an
  // integer of magnitude <= 256, which bf16 holds exactly.
  static float value(int r, size_t i) {
    return static_cast<float>(static_cast<int>((static_cast<size_t>(r) * 37 + i) % 17) - 8);
  }
  static uint16_t encode(float x) { return f32_to_bf16(x); }
  static float decode(uint16_t x) { return bf16_to_f32(x); }
  static constexpr float kAvgTolerance = 0.07f;
};

template <typename T>
std::vector<T> inputs_of(int rank, size_t n) {
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = Elem<T>::encode(Elem<T>::value(rank, i));
  return out;
}

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// The reduction over ranks 0..n-1 of value(k, i), i < len. ncclAvg multiplies every input by
// 1/n in the data type before summing (NVIDIA/nccl src/enqueue.cc): exact, and equal to sum / n,
// when n is a power of two; otherwise compared with a tolerance (avg_tolerance).
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

template <typename T>
float avg_tolerance(int n) {
  return is_power_of_two(n) ? 0.0f : Elem<T>::kAvgTolerance * static_cast<float>(n);
}

// "" when got[0..n) equals want[0..n) (bitwise when tolerance is 0), else the first difference.
template <typename T>
std::string compare(const T* got, const T* want, size_t n, const std::string& what,
                    float tolerance = 0.0f) {
  for (size_t i = 0; i < n; ++i) {
    const float g = Elem<T>::decode(got[i]), w = Elem<T>::decode(want[i]);
    const bool same = tolerance == 0.0f ? std::memcmp(&got[i], &want[i], sizeof(T)) == 0
                                        : std::fabs(g - w) <= tolerance;
    if (!same) {
      return what + ": element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " +
             std::to_string(w);
    }
  }
  return "";
}

template <typename T>
Tensor upload(const std::vector<T>& values, Device device, Stream& stream) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, Elem<T>::kDType, device);
  t.copy_from_host_async(values.data(), values.size() * sizeof(T), stream);
  return t;
}

template <typename T>
std::vector<T> download(const Tensor& t, Stream& stream) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  t.copy_to_host_async(out.data(), out.size() * sizeof(T), stream);
  stream.synchronize();
  return out;
}

char* at(const Tensor& t, size_t elements, size_t elem_size) {
  return static_cast<char*>(t.data()) + elements * elem_size;
}

// ---- every collective, every op, exact values --------------------------------------------

// One rank's device buffers: all_reduce x3 ops, reduce_scatter x3 ops, all_gather, broadcast.
struct RankTensors {
  Tensor ar_in, rs_in, ag_in, bc_in;  // out-of-place inputs
  Tensor ar[3], rs[3], ag, bc;        // recv (in place: also the input)
};

template <typename T>
void run_every_collective(Clique& clique, size_t count, bool in_place) {
  const int n = clique.size();
  const size_t c = (count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);  // per rank
  const size_t total = c * static_cast<size_t>(n);
  const size_t esize = sizeof(T);
  const int root = n / 2;
  const T sentinel = Elem<T>::encode(NAN);
  std::vector<std::vector<T>> want(3);
  for (int o = 0; o < 3; ++o)
    want[static_cast<size_t>(o)] = expected_reduce<T>(n, std::max(count, total), kOps[o]);

  std::vector<std::string> mismatch(static_cast<size_t>(n));
  const RunResult run = run_ranks(clique, [&](int r, std::barrier<>& sync) {
    const auto ur = static_cast<size_t>(r);
    const Device dev = cuda(r);
    Stream& s = clique.stream(r);
    Communicator& comm = clique.comm(r);
    // Phase 1: allocate and upload.
    RankTensors t;
    const std::vector<T> none_count(count, sentinel), none_c(c, sentinel),
        none_total(total, sentinel);
    t.ar_in = upload(inputs_of<T>(r, count), dev, s);
    t.rs_in = upload(inputs_of<T>(r, total), dev, s);
    t.ag_in = upload(inputs_of<T>(r, c), dev, s);
    t.bc_in = upload(r == root ? inputs_of<T>(r, count) : none_count, dev, s);
    for (int o = 0; o < 3; ++o) {
      t.ar[o] = upload(in_place ? inputs_of<T>(r, count) : none_count, dev, s);
      t.rs[o] = upload(in_place ? inputs_of<T>(r, total) : none_c, dev, s);
    }
    std::vector<T> ag_host = none_total;
    if (in_place) {
      const std::vector<T> mine = inputs_of<T>(r, c);
      std::copy(mine.begin(), mine.end(), ag_host.begin() + static_cast<ptrdiff_t>(ur * c));
    }
    t.ag = upload(ag_host, dev, s);
    t.bc = upload(in_place && r == root ? inputs_of<T>(r, count) : none_count, dev, s);
    s.synchronize();
    sync.arrive_and_wait();

    // Phase 2: the eight collectives, in the same order on every rank.
    const DType dtype = Elem<T>::kDType;
    for (int o = 0; o < 3; ++o) {
      comm.all_reduce(in_place ? t.ar[o].data() : t.ar_in.data(), t.ar[o].data(), count, dtype,
                      kOps[o], s);
    }
    for (int o = 0; o < 3; ++o) {
      comm.reduce_scatter(in_place ? t.rs[o].data() : t.rs_in.data(),
                          in_place ? at(t.rs[o], ur * c, esize) : t.rs[o].data(), c, dtype,
                          kOps[o], s);
    }
    comm.all_gather(in_place ? at(t.ag, ur * c, esize) : t.ag_in.data(), t.ag.data(), c, dtype, s);
    comm.broadcast(in_place ? t.bc.data() : t.bc_in.data(), t.bc.data(), count, dtype, root, s);
    s.synchronize();

    // Phase 3: read back and compare.
    std::string& bad = mismatch[ur];
    for (int o = 0; o < 3 && bad.empty(); ++o) {
      const std::string op(reduce_op_name(kOps[o]));
      const float tolerance = kOps[o] == ReduceOp::kAvg ? avg_tolerance<T>(n) : 0.0f;
      bad = compare(download<T>(t.ar[o], s).data(), want[o].data(), count, "all_reduce " + op,
                    tolerance);
      if (bad.empty()) {
        const std::vector<T> got = download<T>(t.rs[o], s);
        bad = compare(got.data() + (in_place ? ur * c : 0), want[o].data() + ur * c, c,
                      "reduce_scatter " + op, tolerance);
      }
    }
    const std::vector<T> ag = download<T>(t.ag, s);
    for (int k = 0; k < n && bad.empty(); ++k) {
      bad = compare(ag.data() + static_cast<size_t>(k) * c, inputs_of<T>(k, c).data(), c,
                    "all_gather block " + std::to_string(k));
    }
    if (bad.empty()) {
      bad = compare(download<T>(t.bc, s).data(), inputs_of<T>(root, count).data(), count,
                    "broadcast");
    }
    if (bad.empty() && !in_place) {  // out of place: the inputs are left alone
      bad = compare(download<T>(t.ar_in, s).data(), inputs_of<T>(r, count).data(), count,
                    "all_reduce send");
    }
  });
  expect_no_errors(run);
  for (int r = 0; r < n; ++r) EXPECT_EQ(mismatch[static_cast<size_t>(r)], "") << "rank " << r;
}

// GetParam(): the number of ranks; 0 means every GPU of the machine.
class NcclCollective : public ::testing::TestWithParam<int> {};

TEST_P(NcclCollective, ExactResultsForEveryCountDtypeAndPlacement) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  const int ranks = GetParam() == 0 ? n : GetParam();
  if (ranks > n) GTEST_SKIP() << "needs " << ranks << " GPUs; this machine has " << n;
  if (GetParam() == 0 && (ranks <= 4 || ranks == 8))
    GTEST_SKIP() << "covered by the " << ranks << "-rank case";
  Clique clique(ranks);
  for (size_t count : kCounts) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE("count " + std::to_string(count) + (in_place ? ", in place" : ", out of place"));
      {
        SCOPED_TRACE("f32");
        run_every_collective<float>(clique, count, in_place);
      }
      {
        SCOPED_TRACE("bf16");
        run_every_collective<uint16_t>(clique, count, in_place);
      }
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, NcclCollective, ::testing::Values(1, 2, 3, 4, 8, 0),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("AllGpus")
                                                  : std::to_string(info.param) + "Ranks";
                         });

// ---- identity, groups ----------------------------------------------------------------------

TEST(NcclCommunicator, ReportsRankSizeDeviceAndBackend) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  Clique clique(n);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(clique.comm(r).rank(), r);
    EXPECT_EQ(clique.comm(r).size(), n);
    EXPECT_EQ(clique.comm(r).device(), cuda(r));
    EXPECT_EQ(clique.comm(r).backend(), "nccl");
  }
}

// Each rank reduces three slices of one buffer in one (nested) group, like buckets.
TEST(NcclCommunicator, GroupedCallsOnEachRankMatchTheExpectedSums) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  constexpr size_t kSlice = 4099;
  Clique clique(n);
  std::vector<std::string> mismatch(static_cast<size_t>(n));
  const RunResult run = run_ranks(clique, [&](int r, std::barrier<>& sync) {
    Stream& s = clique.stream(r);
    Tensor buf = upload(inputs_of<float>(r, 3 * kSlice), cuda(r), s);
    s.synchronize();
    sync.arrive_and_wait();
    Communicator& comm = clique.comm(r);
    comm.group_start();
    comm.group_start();  // nested: launched at the outer group_end
    for (size_t k = 0; k < 3; ++k) {
      float* p = buf.f32() + k * kSlice;
      comm.all_reduce(p, p, kSlice, DType::kF32, ReduceOp::kSum, s);
    }
    comm.group_end();
    comm.group_end();
    s.synchronize();
    mismatch[static_cast<size_t>(r)] =
        compare(download<float>(buf, s).data(),
                expected_reduce<float>(n, 3 * kSlice, ReduceOp::kSum).data(), 3 * kSlice,
                "grouped all_reduce");
  });
  expect_no_errors(run);
  for (int r = 0; r < n; ++r) EXPECT_EQ(mismatch[static_cast<size_t>(r)], "") << "rank " << r;
}

// A group spanning every rank's communicator, issued entirely by one thread (as nccl-tests -t 1
// does): NCCL launches all ranks together at the outermost group_end.
TEST(NcclCommunicator, OneThreadIssuesAGroupSpanningEveryRank) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  constexpr size_t kCount = 1 << 16;
  Clique clique(n);
  std::vector<Tensor> bufs;
  for (int r = 0; r < n; ++r)
    bufs.push_back(upload(inputs_of<uint16_t>(r, kCount), cuda(r), clique.stream(r)));
  for (int r = 0; r < n; ++r) clique.stream(r).synchronize();
  for (int r = 0; r < n; ++r) clique.comm(r).group_start();
  for (int r = 0; r < n; ++r) {
    void* p = bufs[static_cast<size_t>(r)].data();
    clique.comm(r).all_reduce(p, p, kCount, DType::kBF16, ReduceOp::kSum, clique.stream(r));
  }
  for (int r = n - 1; r >= 0; --r) clique.comm(r).group_end();
  const std::vector<uint16_t> want = expected_reduce<uint16_t>(n, kCount, ReduceOp::kSum);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(compare(download<uint16_t>(bufs[static_cast<size_t>(r)], clique.stream(r)).data(),
                      want.data(), kCount, "spanning group"),
              "")
        << "rank " << r;
  }
}

// ---- errors, abort, teardown ---------------------------------------------------------------

// Argument errors are raised before NCCL is called: no rank is left waiting and the clique works.
TEST(NcclCommunicator, ArgumentErrorsAreClearAndLeaveTheCliqueUsable) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  Clique clique(n);
  Communicator& comm = clique.comm(0);
  Stream& s = clique.stream(0);
  Tensor buf = upload(inputs_of<float>(0, 64), cuda(0), s);
  s.synchronize();
  float* p = buf.f32();
  auto host_stream = device_runtime({DeviceKind::kHost, 0}).create_stream();
  EXPECT_TRUE(contains(error_of([&] { comm.all_reduce(p, p, 64, DType::kI32, ReduceOp::kSum, s); }),
                       "use f32 or bf16"));
  EXPECT_TRUE(contains(
      error_of([&] { comm.all_reduce(p, p, 64, DType::kF32, ReduceOp::kSum, *host_stream); }),
      "the stream belongs to host:0"));
  EXPECT_TRUE(contains(
      error_of([&] { comm.all_reduce(p, p + 1, 32, DType::kF32, ReduceOp::kSum, s); }), "overlap"));
  EXPECT_TRUE(
      contains(error_of([&] { comm.all_reduce(nullptr, p, 8, DType::kF32, ReduceOp::kSum, s); }),
               "non-null"));
  EXPECT_TRUE(
      contains(error_of([&] { comm.broadcast(p, p, 8, DType::kF32, n, s); }), "out of range"));
  EXPECT_TRUE(contains(error_of([&] { comm.group_end(); }), "without a matching group_start"));

  std::vector<std::string> mismatch(static_cast<size_t>(n));
  const RunResult run = run_ranks(clique, [&](int r, std::barrier<>& sync) {
    Stream& rs = clique.stream(r);
    Tensor t = upload(inputs_of<float>(r, 1000), cuda(r), rs);
    rs.synchronize();
    sync.arrive_and_wait();
    clique.comm(r).all_reduce(t.data(), t.data(), 1000, DType::kF32, ReduceOp::kMax, rs);
    mismatch[static_cast<size_t>(r)] = compare(
        download<float>(t, rs).data(), expected_reduce<float>(n, 1000, ReduceOp::kMax).data(), 1000,
        "all_reduce max after argument errors");
  });
  expect_no_errors(run);
  for (int r = 0; r < n; ++r) EXPECT_EQ(mismatch[static_cast<size_t>(r)], "") << "rank " << r;
}

// Every rank keeps issuing all-reduces until another thread aborts the clique: each rank stops
// with "communicator aborted", and every later call throws it too.
TEST(NcclCommunicator, AbortFromAnotherThreadEndsEveryRankAndEveryLaterCall) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  constexpr size_t kCount = 1 << 12;
  Clique clique(n);
  std::vector<Tensor> bufs(static_cast<size_t>(n));
  std::thread aborter([&] {
    std::this_thread::sleep_for(300ms);
    clique.comm(n - 1).abort();
  });
  const RunResult run = run_ranks(
      clique,
      [&](int r, std::barrier<>& sync) {
        Stream& s = clique.stream(r);
        Tensor& buf = bufs[static_cast<size_t>(r)];
        buf = upload(std::vector<float>(kCount, 0.0f), cuda(r), s);
        s.synchronize();
        sync.arrive_and_wait();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; std::chrono::steady_clock::now() - start < 30s; ++i) {
          clique.comm(r).all_reduce(buf.data(), buf.data(), kCount, DType::kF32, ReduceOp::kSum, s);
          if (i % 16 == 15) s.synchronize();  // keep the launch queue short
        }
      },
      60s);
  aborter.join();
  EXPECT_FALSE(run.watchdog_fired);
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(contains(run.errors[static_cast<size_t>(r)], "communicator aborted"))
        << "rank " << r << ": " << run.errors[static_cast<size_t>(r)];
  }
  for (int r = 0; r < n; ++r) {
    Communicator& comm = clique.comm(r);
    void* p = bufs[static_cast<size_t>(r)].data();
    const std::string later = error_of([&] {
      comm.all_reduce(p, p, kCount, DType::kF32, ReduceOp::kSum, clique.stream(r));
    });
    EXPECT_TRUE(contains(later, "communicator aborted")) << later;
    EXPECT_TRUE(
        contains(later, "abort() was called on the communicator of rank " + std::to_string(n - 1)))
        << later;
    EXPECT_TRUE(contains(error_of([&] { comm.group_start(); }), "communicator aborted"));
    EXPECT_NO_THROW(comm.abort());  // once is enough; again is harmless
    EXPECT_NO_THROW(clique.stream(r).synchronize());  // aborted NCCL kernels have exited
  }
}

TEST(NcclCommunicator, AbortBeforeAnyCollectiveThenTeardown) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  Clique clique(n);
  clique.comm(0).abort();
  for (int r = 0; r < n; ++r) {
    ErrorKind kind = ErrorKind::kInternal;
    const std::string message = error_of([&] {
      clique.comm(r).broadcast(nullptr, nullptr, 0, DType::kF32, 0, clique.stream(r));
    }, &kind);
    EXPECT_TRUE(contains(message, "communicator aborted")) << message;
    EXPECT_EQ(kind, ErrorKind::kAborted);
  }
}

// Teardown finalizes and destroys every communicator together; the GPUs can then take new ones.
TEST(NcclCommunicator, TeardownAfterWorkAndRecreationWork) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Clique clique(n);
    std::vector<std::string> mismatch(static_cast<size_t>(n));
    const RunResult run = run_ranks(clique, [&](int r, std::barrier<>& sync) {
      Stream& s = clique.stream(r);
      Tensor t = upload(inputs_of<float>(r, 777), cuda(r), s);
      s.synchronize();
      sync.arrive_and_wait();
      clique.comm(r).all_reduce(t.data(), t.data(), 777, DType::kF32, ReduceOp::kSum, s);
      // Every rank now holds the same sums, so their max is the sum again.
      clique.comm(r).all_reduce(t.data(), t.data(), 777, DType::kF32, ReduceOp::kMax, s);
      mismatch[static_cast<size_t>(r)] =
          compare(download<float>(t, s).data(),
                  expected_reduce<float>(n, 777, ReduceOp::kSum).data(), 777, "all_reduce");
    });
    expect_no_errors(run);
    for (int r = 0; r < n; ++r) EXPECT_EQ(mismatch[static_cast<size_t>(r)], "") << "rank " << r;
  }
}

// Only rank 0 calls all_reduce. Its call either times out in NCCL (the clique is aborted) or is
// enqueued and its kernel waits on the GPU until the watchdog aborts the clique and the stream.
// Either way nothing hangs, and afterwards every call throws "communicator aborted".
TEST(NcclCommunicator, MissingPeerIsBoundedByTimeoutOrAbort) {
  int n = cuda_availability().device_count;
  if (n == 0) GTEST_SKIP() << cuda_availability().reason_unavailable;
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs; this machine has " << n;
  Clique clique(n, CommunicatorOptions{20s});
  std::vector<Tensor> bufs;
  for (int r = 0; r < n; ++r)
    bufs.push_back(upload(std::vector<float>(256, 1.0f), cuda(r), clique.stream(r)));
  for (int r = 0; r < n; ++r) clique.stream(r).synchronize();
  const RunResult run = run_ranks(
      clique,
      [&](int r, std::barrier<>&) {
        if (r != 0) return;
        void* p = bufs[0].data();
        clique.comm(0).all_reduce(p, p, 256, DType::kF32, ReduceOp::kSum, clique.stream(0));
      },
      30s);
  const std::string& rank0 = run.errors[0];
  EXPECT_TRUE(contains(rank0, "did not finish") || contains(rank0, "stream aborted")) << rank0;
  const std::string later = error_of([&] {
    clique.comm(1).all_reduce(bufs[1].data(), bufs[1].data(), 256, DType::kF32, ReduceOp::kSum,
                              clique.stream(1));
  });
  EXPECT_TRUE(contains(later, "communicator aborted") || contains(later, "stream aborted"))
      << later;
}

}  // namespace
}  // namespace ls
