// The hierarchical host collectives across processes (run under mpirun -np 2 and 3, 1 or 2 host
// devices per process; also as one plain process): every collective with inputs derived from
// the global replica index and exact expected values, f32 and bf16, sum/avg/max, in place and
// out of place; and the documented summation order, bit for bit, on inputs that round.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <lockstep/dtype.h>
#include "mpi/mpi_test_main.h"

namespace ls::mpi_test {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
constexpr DType kDTypes[] = {DType::kF32, DType::kBF16};
constexpr size_t kCounts[] = {0, 1, 7, 1000, 65537};

// Small integers: every sum below is exact in f32 and bf16.
float input(int replica, size_t i) { return static_cast<float>((replica + 1) * (i % 5 + 1)); }

// The buffer of `count` elements of `dtype` holding f(i).
template <typename F>
std::vector<uint16_t> filled(size_t count, DType dtype, F f) {
  std::vector<uint16_t> buffer(count * dtype_size(dtype) / 2 + 1);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::kBF16) {
      buffer[i] = f32_to_bf16(f(i));
    } else {
      const float x = f(i);
      std::memcpy(reinterpret_cast<char*>(buffer.data()) + 4 * i, &x, 4);
    }
  }
  return buffer;
}

float read(const std::vector<uint16_t>& buffer, size_t i, DType dtype) {
  if (dtype == DType::kBF16) return bf16_to_f32(buffer[i]);
  float x;
  std::memcpy(&x, reinterpret_cast<const char*>(buffer.data()) + 4 * i, 4);
  return x;
}

// The reduction of input(g, i) over every replica g, as the communicator defines it.
float expected_reduction(ReduceOp op, size_t i, DType dtype) {
  const int n = World::current().replicas();
  float acc = input(0, i);
  for (int g = 1; g < n; ++g)
    acc = op == ReduceOp::kMax ? std::max(acc, input(g, i)) : acc + input(g, i);
  if (op == ReduceOp::kAvg) acc /= static_cast<float>(n);
  return dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(acc)) : acc;
}

void expect_no_errors(const std::vector<std::exception_ptr>& errors) {
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& error) {
      ADD_FAILURE() << error.what();
    }
  }
}

TEST(MpiCollectives, AllReduceExact) {
  Group group;
  const World& world = World::current();
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          std::vector<std::vector<uint16_t>> send(group.local()), recv(group.local());
          for (int l = 0; l < group.local(); ++l) {
            const int g = world.global_replica(l);
            send[l] = filled(count, dtype, [&](size_t i) { return input(g, i); });
            recv[l] = in_place ? send[l] : filled(count, dtype, [](size_t) { return -1.0f; });
          }
          expect_no_errors(group.run([&](int l, Communicator& comm, Stream& stream) {
            void* out = recv[l].data();
            comm.all_reduce(in_place ? out : send[l].data(), out, count, dtype, op, stream);
          }));
          for (int l = 0; l < group.local(); ++l) {
            for (size_t i = 0; i < count; ++i) {
              ASSERT_EQ(read(recv[l], i, dtype), expected_reduction(op, i, dtype))
                  << "replica " << world.global_replica(l) << " element " << i << " count " << count
                  << " " << reduce_op_name(op) << " bf16=" << (dtype == DType::kBF16)
                  << " in_place=" << in_place;
            }
          }
        }
      }
    }
  }
}

TEST(MpiCollectives, ReduceScatterExact) {
  Group group;
  const World& world = World::current();
  const size_t n = static_cast<size_t>(world.replicas());
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{333}}) {
        std::vector<std::vector<uint16_t>> send(group.local()), recv(group.local());
        for (int l = 0; l < group.local(); ++l) {
          const int g = world.global_replica(l);
          send[l] = filled(n * count, dtype, [&](size_t i) { return input(g, i); });
          recv[l] = filled(count, dtype, [](size_t) { return -1.0f; });
        }
        expect_no_errors(group.run([&](int l, Communicator& comm, Stream& stream) {
          comm.reduce_scatter(send[l].data(), recv[l].data(), count, dtype, op, stream);
        }));
        for (int l = 0; l < group.local(); ++l) {
          const size_t block = static_cast<size_t>(world.global_replica(l)) * count;
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(read(recv[l], i, dtype), expected_reduction(op, block + i, dtype))
                << "replica " << world.global_replica(l) << " element " << i;
          }
        }
      }
    }
  }
}

TEST(MpiCollectives, AllGatherExact) {
  Group group;
  const World& world = World::current();
  const size_t n = static_cast<size_t>(world.replicas());
  for (DType dtype : kDTypes) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
      for (bool in_place : {false, true}) {
        std::vector<std::vector<uint16_t>> send(group.local()), recv(group.local());
        for (int l = 0; l < group.local(); ++l) {
          const size_t g = static_cast<size_t>(world.global_replica(l));
          send[l] = filled(count, dtype, [&](size_t i) { return input(static_cast<int>(g), i); });
          // In place: the send block is block g of recv, already holding the input.
          recv[l] = filled(n * count, dtype, [&](size_t i) {
            return in_place && i / count == g ? input(static_cast<int>(g), i % count) : -1.0f;
          });
        }
        expect_no_errors(group.run([&](int l, Communicator& comm, Stream& stream) {
          const size_t g = static_cast<size_t>(world.global_replica(l));
          char* out = reinterpret_cast<char*>(recv[l].data());
          const void* in = in_place ? static_cast<const void*>(out + g * count * dtype_size(dtype))
                                    : send[l].data();
          comm.all_gather(in, out, count, dtype, stream);
        }));
        for (int l = 0; l < group.local(); ++l) {
          for (size_t i = 0; i < n * count; ++i) {
            ASSERT_EQ(read(recv[l], i, dtype), input(static_cast<int>(i / count), i % count))
                << "replica " << world.global_replica(l) << " element " << i;
          }
        }
      }
    }
  }
}

TEST(MpiCollectives, BroadcastFromEveryRoot) {
  Group group;
  const World& world = World::current();
  for (DType dtype : kDTypes) {
    for (int root = 0; root < world.replicas(); ++root) {
      const size_t count = 517;
      std::vector<std::vector<uint16_t>> buffers(group.local());
      for (int l = 0; l < group.local(); ++l) {
        const int g = world.global_replica(l);
        buffers[l] =
            filled(count, dtype, [&](size_t i) { return g == root ? input(g, i) : -1.0f; });
      }
      expect_no_errors(group.run([&](int l, Communicator& comm, Stream& stream) {
        comm.broadcast(buffers[l].data(), buffers[l].data(), count, dtype, root, stream);
      }));
      for (int l = 0; l < group.local(); ++l) {
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(read(buffers[l], i, dtype), input(root, i))
              << "root " << root << " replica " << world.global_replica(l) << " element " << i;
        }
      }
    }
  }
}

TEST(MpiCollectives, ReduceToEveryRoot) {
  Group group;
  const World& world = World::current();
  for (ReduceOp op : kOps) {
    for (int root = 0; root < world.replicas(); ++root) {
      const size_t count = 300;
      std::vector<std::vector<uint16_t>> send(group.local()), recv(group.local());
      for (int l = 0; l < group.local(); ++l) {
        const int g = world.global_replica(l);
        send[l] = filled(count, DType::kF32, [&](size_t i) { return input(g, i); });
        recv[l] = filled(count, DType::kF32, [](size_t) { return -1.0f; });
      }
      expect_no_errors(group.run([&](int l, Communicator& comm, Stream& stream) {
        comm.reduce(send[l].data(), recv[l].data(), count, DType::kF32, op, root, stream);
      }));
      for (int l = 0; l < group.local(); ++l) {
        const bool is_root = world.global_replica(l) == root;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(read(recv[l], i, DType::kF32),
                    is_root ? expected_reduction(op, i, DType::kF32) : -1.0f)
              << "root " << root << " replica " << world.global_replica(l) << " element " << i;
        }
      }
    }
  }
}

// Inputs that round: the result must be, bit for bit, (local replicas in order) per process,
// then the processes' partials in process order, as Note [Hierarchical host collectives] says.
TEST(MpiCollectives, SummationOrderIsTheDocumentedOne) {
  Group group;
  const World& world = World::current();
  const size_t count = 4099;
  auto value = [](int g, size_t i) { return std::sin(0.37f * static_cast<float>(i) + g) * 1e3f; };
  std::vector<float> expected(count);
  for (size_t i = 0; i < count; ++i) {
    float total = 0.0f;
    for (int p = 0; p < world.size(); ++p) {
      float partial = value(world.first_replica(p), i);
      for (int l = 1; l < world.local_device_count(p); ++l) {
        partial += value(world.first_replica(p) + l, i);
      }
      total = p == 0 ? partial : total + partial;
    }
    expected[i] = total;
  }
  for (int repeat = 0; repeat < 2; ++repeat) {
    std::vector<std::vector<float>> buffers(group.local(), std::vector<float>(count));
    for (int l = 0; l < group.local(); ++l) {
      for (size_t i = 0; i < count; ++i) buffers[l][i] = value(world.global_replica(l), i);
    }
    expect_no_errors(group.run([&](int l, Communicator& comm, Stream& stream) {
      comm.all_reduce(buffers[l].data(), buffers[l].data(), count, DType::kF32, ReduceOp::kSum,
                      stream);
    }));
    for (int l = 0; l < group.local(); ++l) {
      ASSERT_EQ(std::memcmp(buffers[l].data(), expected.data(), count * sizeof(float)), 0)
          << "replica " << world.global_replica(l) << " (repeat " << repeat << ")";
    }
  }
}

}  // namespace
}  // namespace ls::mpi_test
