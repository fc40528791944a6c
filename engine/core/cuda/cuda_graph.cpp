// Graph capture on CUDA; see engine/core/cuda/cuda_graph.h for the contract and
// Note [Events recorded during capture].
#include "engine/core/cuda/cuda_graph.h"

#include <cstdint>
#include <new>
#include <string>
#include <utility>

#include "engine/core/cuda/cuda_check.h"
#include "engine/core/cuda/cuda_runtime.h"
#include "engine/core/cuda/cuda_stream_access.h"
#include <lockstep/error.h>

namespace ls {
namespace {

constexpr const char* kFallback = "; the engine falls back to eager steps";

// A captured step: the instantiated graph, the graph it came from and the pool its memory lives
// in. cudaGraphLaunch enqueues every node on the origin stream's device as one unit, after the
// work already on that stream; branches that ran on joined streams during the capture run
// inside the graph, so later work on a joined stream must wait on an event recorded on origin
// after launch() to be ordered after it.
class CudaGraph final : public StreamGraph {
 public:
  CudaGraph(Device device, CapturePoolHandle pool, cudaGraph_t graph, cudaGraphExec_t exec,
            int64_t nodes)
      : device_(device), pool_(std::move(pool)), graph_(graph), exec_(exec), nodes_(nodes) {}

  // A launch still running finishes first: CUDA frees an executable graph that is in flight when
  // it completes. The pool (released after the graph, members go in reverse order) hands its
  // blocks back to the allocator at once; as for any freed block, they are reused in stream
  // order (lockstep/allocator.h), after the launches already enqueued on origin.
  ~CudaGraph() override {
    DeviceGuard guard(device_.index, std::nothrow);
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    (void)cudaGetLastError();  // never throw from here; keep a failure from lingering
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void launch(Stream& origin) override {
    LS_CHECK(origin.device() == device_, "graph launch: the graph was captured on ", device_.str(),
             " but the stream is on ", origin.device().str(),
             "; launch it on the stream its capture began on");
    const cudaStream_t stream = cuda_stream_of(origin);
    DeviceGuard guard(device_.index);
    LS_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  }

  int64_t nodes() const override { return nodes_; }

 private:
  Device device_;
  CapturePoolHandle pool_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int64_t nodes_ = 0;
};

// Destroys what a failed end_capture made before raising its error.
void destroy_quietly(cudaGraph_t graph, cudaGraphExec_t exec) {
  if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

}  // namespace

CapturePoolHandle begin_cuda_capture(Device device, cudaStream_t origin,
                                     CachingAllocator& allocator) {
  DeviceGuard guard(device.index);
  CapturePoolHandle pool = allocator.begin_capture_pool();
  // ThreadLocal: this thread may not make calls a capture forbids (host waits, cudaMalloc
  // outside the allocator's relaxed section), while the other replicas' threads capture their
  // own streams at the same time, as NCCL asks of graphs with one thread per GPU.
  const cudaError_t status = cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    allocator.end_capture_pool();  // `pool` goes with this scope
    LS_THROW("begin_capture on ", device.str(),
             ": cudaStreamBeginCapture failed: ", detail::describe_cuda_error(status), kFallback);
  }
  return pool;
}

std::unique_ptr<StreamGraph> end_cuda_capture(Device device, cudaStream_t origin,
                                              CachingAllocator& allocator, CapturePoolHandle pool) {
  DeviceGuard guard(device.index);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(origin, &graph);
  allocator.end_capture_pool();  // whatever happened, this thread allocates as usual again
  if (ended != cudaSuccess || graph == nullptr) {
    destroy_quietly(graph, nullptr);
    LS_THROW("end_capture on ", device.str(), ": the step could not be captured into a graph (",
             ended == cudaSuccess ? "cudaStreamEndCapture returned no graph"
                                  : detail::describe_cuda_error(ended),
             ")", kFallback);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  if (made != cudaSuccess) {
    const std::string why = detail::describe_cuda_error(made);
    destroy_quietly(graph, exec);
    LS_THROW("end_capture on ", device.str(), ": cudaGraphInstantiate failed: ", why, kFallback);
  }
  size_t nodes = 0;
  const cudaError_t counted = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (counted != cudaSuccess) {
    const std::string why = detail::describe_cuda_error(counted);
    destroy_quietly(graph, exec);
    LS_THROW("end_capture on ", device.str(), ": cudaGraphGetNodes failed: ", why, kFallback);
  }
  return std::make_unique<CudaGraph>(device, std::move(pool), graph, exec,
                                     static_cast<int64_t>(nodes));
}

bool cuda_stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LS_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace ls
