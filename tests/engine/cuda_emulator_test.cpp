// The CPU emulator of CUDA kernels (engine/core/cuda_emulator/, LOCKSTEP_CUDA=EMULATED builds
// only): barriers, __syncthreads_count, warp shuffles (through ops/cuda/block_reduce.cuh), the
// error of a barrier some threads exited without reaching, launch limits, per-block shared
// memory, thread and block coordinates, grid-stride loops over sizes that are no multiple of the
// block, the device memory limit, the launch log, and the 16-bit conversions. Tests that launch
// need an emulated GPU (LOCKSTEP_EMULATED_GPUS=1, as the ctest `cuda_emulator` sets) and skip
// without one.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "engine/core/cuda_emulator/emulator.h"
#include <lockstep/device.h>
#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_launch.h"

namespace ls::test {
namespace {

// Each block fills its shared array with values of its own, then every thread reads its
// neighbour's slot: wrong without the barrier, and wrong if blocks shared the array.
__global__ void rotate_kernel(int* out) {
  __shared__ int slots[1024];
  const int t = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  slots[t] = static_cast<int>(blockIdx.x) * 10000 + t;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = slots[(t + 1) % n];
}

__global__ void count_kernel(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  const int count = __syncthreads_count(t % 3 == 0);
  const int any = __syncthreads_or(t == 5);
  const int all = __syncthreads_and(t >= 0);
  const int none = __syncthreads_or(0);
  if (t == 0) {
    out[0] = count;
    out[1] = any;
    out[2] = all;
    out[3] = none;
  }
}

// Threads from `first_exit` on leave before the barrier the others wait at.
__global__ void partial_barrier_kernel(int first_exit, int* out) {
  if (static_cast<int>(threadIdx.x) >= first_exit) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void partial_shuffle_kernel(float* out) {
  if (threadIdx.x == 7) return;
  out[threadIdx.x] = cuda_ops::warp_sum(1.0f);
}

__global__ void block_sum_kernel(const float* x, int64_t n, float* sum, float* max) {
  __shared__ float shared[cuda_ops::kWarp];
  float partial = 0.0f, largest = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    partial += x[i];
    largest = fmaxf(largest, x[i]);
  }
  const float total = cuda_ops::block_sum(partial, shared);
  const float top = cuda_ops::block_max(largest, shared);
  if (threadIdx.x == 0) {
    *sum = total;
    *max = top;
  }
}

__global__ void shuffle_kinds_kernel(int* down, int* up, int* idx) {
  const int lane = static_cast<int>(threadIdx.x) % warpSize;
  down[threadIdx.x] = __shfl_down_sync(0xffffffffu, lane, 3);
  up[threadIdx.x] = __shfl_up_sync(0xffffffffu, lane, 2);
  idx[threadIdx.x] = __shfl_sync(0xffffffffu, lane * 10, 5);
}

__global__ void coordinates_kernel(int* out) {
  const int thread = static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int block = static_cast<int>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
  const int per_block = static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  out[block * per_block + thread] = block * per_block + thread;
}

__global__ void increment_kernel(int* x, int64_t n) {
  LS_GRID_STRIDE_LOOP(i, n) { x[i] += 1; }
}

class CudaEmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_availability().device_count == 0)
      GTEST_SKIP() << "no emulated GPU: run with LOCKSTEP_EMULATED_GPUS=1";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    (void)cudaGetLastError();
  }
};

TEST_F(CudaEmulatorTest, SyncthreadsOrdersSharedMemoryAndEachBlockHasItsOwn) {
  const int blocks = 3, threads = 100;  // not a multiple of the warp
  std::vector<int> out(blocks * threads, -1);
  LS_LAUNCH(rotate_kernel, blocks, threads, 0, nullptr, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t)
      EXPECT_EQ(out[b * threads + t], b * 10000 + (t + 1) % threads) << b << " " << t;
  }
}

TEST_F(CudaEmulatorTest, SyncthreadsCountOrAnd) {
  std::vector<int> out(4, -1);
  LS_LAUNCH(count_kernel, 1, 100, 0, nullptr, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out[0], 34);  // 0, 3, ..., 99
  EXPECT_EQ(out[1], 1);
  EXPECT_EQ(out[2], 1);
  EXPECT_EQ(out[3], 0);
}

TEST_F(CudaEmulatorTest, BarrierSomeThreadsExitedIsALaunchFailureNamingKernelAndBlock) {
  std::vector<int> out(64, 0);
  LS_LAUNCH(partial_barrier_kernel, 2, 64, 0, nullptr, 40, out.data());
  const cudaError_t status = cudaGetLastError();
  EXPECT_EQ(status, cudaErrorLaunchFailure);
  const std::string what = cudaGetErrorString(status);
  EXPECT_NE(what.find("partial_barrier_kernel"), std::string::npos) << what;
  EXPECT_NE(what.find("block (0, 0, 0)"), std::string::npos) << what;
  EXPECT_NE(what.find("__syncthreads() reached by 40 of 64"), std::string::npos) << what;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once
  // Through the launch check: an ls::Error with the same text.
  LS_LAUNCH(partial_barrier_kernel, 1, 64, 0, nullptr, 1, out.data());
  try {
    LS_CUDA_CHECK_LAUNCH();
    ADD_FAILURE() << "expected an ls::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("partial_barrier_kernel"), std::string::npos) << e.what();
  }
  // The dropped fibers are remade: the next launch with barriers runs.
  LS_LAUNCH(partial_barrier_kernel, 2, 64, 0, nullptr, 64, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(std::count(out.begin(), out.end(), 1), 64);
}

TEST_F(CudaEmulatorTest, ShuffleWithAnExitedLaneIsALaunchFailure) {
  std::vector<float> out(32, 0.0f);
  LS_LAUNCH(partial_shuffle_kernel, 1, 32, 0, nullptr, out.data());
  const cudaError_t status = cudaGetLastError();
  ASSERT_EQ(status, cudaErrorLaunchFailure);
  const std::string what = cudaGetErrorString(status);
  EXPECT_NE(what.find("warp barrier"), std::string::npos) << what;
  EXPECT_NE(what.find("31 of its 32"), std::string::npos) << what;
}

TEST_F(CudaEmulatorTest, BlockReductionsOfBlockReduceCuh) {
  for (const int threads : {32, 64, 256, 1024}) {
    for (const int64_t n : {int64_t{1}, int64_t{31}, int64_t{1000}, int64_t{5000}}) {
      std::vector<float> x(static_cast<size_t>(n));
      std::iota(x.begin(), x.end(), 1.0f);  // exact sums below 2^24
      float sum = -1.0f, max = -1.0f;
      LS_LAUNCH(block_sum_kernel, 1, threads, 0, nullptr, x.data(), n, &sum, &max);
      ASSERT_EQ(cudaGetLastError(), cudaSuccess);
      EXPECT_EQ(sum, static_cast<float>(n * (n + 1) / 2)) << threads << " threads, n " << n;
      EXPECT_EQ(max, static_cast<float>(n));
    }
  }
}

TEST_F(CudaEmulatorTest, ShuffleUpDownIdx) {
  const int threads = 64;
  std::vector<int> down(threads), up(threads), idx(threads);
  LS_LAUNCH(shuffle_kinds_kernel, 1, threads, 0, nullptr, down.data(), up.data(), idx.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < threads; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(down[t], lane + 3 < 32 ? lane + 3 : lane);
    EXPECT_EQ(up[t], lane >= 2 ? lane - 2 : lane);
    EXPECT_EQ(idx[t], 50);
  }
}

TEST_F(CudaEmulatorTest, ThreeDimensionalCoordinates) {
  const dim3 grid(2, 3, 2), block(4, 3, 2);
  std::vector<int> out(12 * 24, -1);
  LS_LAUNCH(coordinates_kernel, grid, block, 0, nullptr, out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], static_cast<int>(i));
}

TEST_F(CudaEmulatorTest, GridStrideLoopCoversSizesNotAMultipleOfTheGrid) {
  for (const int64_t n : {int64_t{1}, int64_t{95}, int64_t{97}, int64_t{1000003}}) {
    std::vector<int> x(static_cast<size_t>(n), 0);
    LS_LAUNCH(increment_kernel, 7, 96, 0, nullptr, x.data(), n);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(std::count(x.begin(), x.end(), 1), n) << n;
  }
}

TEST_F(CudaEmulatorTest, LaunchLimitsAreInvalidConfigurations) {
  int x = 0;
  const struct {
    dim3 grid, block;
    size_t shared;
  } bad[] = {
      {dim3(1), dim3(1025), 0},          {dim3(1), dim3(32, 33), 0},
      {dim3(1), dim3(1, 1, 65), 0},      {dim3(0), dim3(32), 0},
      {dim3(1), dim3(0), 0},             {dim3(1, 65536), dim3(32), 0},
      {dim3(1, 1, 65536), dim3(32), 0},  {dim3(0x80000000u), dim3(32), 0},
      {dim3(1), dim3(32), 48 * 1024 + 1},
  };
  for (const auto& config : bad) {
    LS_LAUNCH(increment_kernel, config.grid, config.block, config.shared, nullptr, &x, int64_t{1});
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration)
        << config.grid.x << "x" << config.grid.y << "x" << config.grid.z << " blocks of "
        << config.block.x << "x" << config.block.y << "x" << config.block.z;
  }
  EXPECT_EQ(x, 0);  // nothing ran
  LS_LAUNCH(increment_kernel, 1, 1025, 0, nullptr, &x, int64_t{1});
  try {
    LS_CUDA_CHECK_LAUNCH();
    ADD_FAILURE() << "expected an ls::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidConfiguration"), std::string::npos);
  }
  // The limits themselves are fine: each block's first thread adds 1 (a grid-stride loop over x).
  LS_LAUNCH(increment_kernel, dim3(1), dim3(1024), 48 * 1024, nullptr, &x, int64_t{1});
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  LS_LAUNCH(increment_kernel, dim3(1, 65535, 1), dim3(1, 1, 1), 0, nullptr, &x, int64_t{1});
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(x, 1 + 65535);
}

TEST_F(CudaEmulatorTest, LaunchOnADestroyedStreamIsAnInvalidHandle) {
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int x = 0;
  LS_LAUNCH(increment_kernel, 1, 32, 0, stream, &x, int64_t{1});
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  LS_LAUNCH(increment_kernel, 1, 32, 0, stream, &x, int64_t{1});
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(x, 1);
}

TEST_F(CudaEmulatorTest, LaunchLogNamesKernelsWithoutTemplateArguments) {
  EXPECT_EQ(cuda_emu::kernel_name("adamw_step_kernel<true>"), "adamw_step_kernel");
  EXPECT_EQ(cuda_emu::kernel_name("ls::cuda_ops::sgd_step_kernel<false>"), "sgd_step_kernel");
  int x = 0;
  LS_LAUNCH(increment_kernel, 1, 32, 0, nullptr, &x, int64_t{1});
  const std::vector<std::string> names = cuda_emu::launched_kernels();
  EXPECT_NE(std::find(names.begin(), names.end(), "increment_kernel"), names.end());
}

TEST_F(CudaEmulatorTest, DeviceMemoryLimitIsOutOfMemory) {
  CachingAllocator& allocator = device_runtime(Device{DeviceKind::kCuda, 0}).allocator();
  allocator.release_cached();  // what earlier tests left cached no longer counts
  const size_t limit = cuda_emu::memory_limit(0);
  const size_t in_use = cuda_emu::memory_in_use(0);
  cuda_emu::set_memory_limit(0, in_use + (size_t{1} << 20));
  void* ptr = nullptr;
  EXPECT_EQ(cudaMalloc(&ptr, size_t{2} << 20), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudaMalloc(&ptr, size_t{1} << 19), cudaSuccess);
  EXPECT_EQ(cuda_emu::memory_in_use(0), in_use + (size_t{1} << 19));
  EXPECT_EQ(cudaFree(ptr), cudaSuccess);
  EXPECT_EQ(cudaFree(ptr), cudaErrorInvalidDevicePointer);  // twice
  (void)cudaGetLastError();
  // Through the caching allocator: released cache, retried, then a clear error.
  std::string message = "<no error>";
  try {
    allocator.allocate(size_t{4} << 20);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("out of memory"), std::string::npos) << message;
  cuda_emu::set_memory_limit(0, limit);
}

// ---- conversions: no device needed --------------------------------------------------------------

TEST(CudaEmulatorConversions, HalfRoundsToNearestEven) {
  const auto bits = [](float f) { return __half_as_ushort(__float2half_rn(f)); };
  EXPECT_EQ(bits(1.0f), 0x3c00);
  EXPECT_EQ(bits(1.0f + 0x1p-11f), 0x3c00);         // tie: to even
  EXPECT_EQ(bits(1.0f + 3 * 0x1p-11f), 0x3c02);     // tie: to even (up)
  EXPECT_EQ(bits(65504.0f), 0x7bff);
  EXPECT_EQ(bits(65519.0f), 0x7bff);
  EXPECT_EQ(bits(65520.0f), 0x7c00);                // rounds to inf
  EXPECT_EQ(bits(-1e10f), 0xfc00);
  EXPECT_EQ(bits(0x1p-24f), 0x0001);                // smallest subnormal
  EXPECT_EQ(bits(0x1p-25f), 0x0000);                // tie with 0: to even
  EXPECT_EQ(bits(3 * 0x1p-25f), 0x0002);            // tie: to even (up)
  EXPECT_EQ(bits(0x1p-14f - 0x1p-26f), 0x0400);     // rounds up into the normals
  EXPECT_EQ(bits(-0.0f), 0x8000);
  EXPECT_EQ(bits(NAN), 0x7fff);
  for (const float f : {1.0f, -2.5f, 0x1p-24f, 0x1p-14f, 65504.0f, 3.140625f})
    EXPECT_EQ(__half2float(__float2half_rn(f)), f);
}

TEST(CudaEmulatorConversions, Bfloat16RoundsToNearestEven) {
  const auto bits = [](float f) { return __bfloat16_as_ushort(__float2bfloat16(f)); };
  EXPECT_EQ(bits(1.0f), 0x3f80);
  EXPECT_EQ(bits(1.0f + 0x1p-8f), 0x3f80);       // tie: to even
  EXPECT_EQ(bits(1.0f + 3 * 0x1p-8f), 0x3f82);   // tie: to even (up)
  EXPECT_EQ(bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(bits(NAN), 0x7fff);
  EXPECT_EQ(__bfloat162float(__float2bfloat16(-3.0f)), -3.0f);
}

}  // namespace
}  // namespace ls::test
