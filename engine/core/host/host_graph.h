// The host backend's StreamGraph (engine/core/graph.h): while a HostStream is captured, what it
// is handed (work, event records and waits) and the calls the communicators defer
// (DeviceRuntime::capture_call) are appended to one HostCapture in the order the capturing
// thread made them; a launch hands them to the same streams again in that order. That is what a
// CUDA graph launch amounts to for the streams: the same work in the same order, with none of
// the host's per-op work (autograd, allocation, checks, dispatch) done again. Internal to
// engine/core/host/.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include <lockstep/allocator.h>
#include "engine/core/graph.h"
#include <lockstep/stream.h>

namespace ls {

class HostStream;

struct HostCapture {
  enum class Kind { kWork, kRecord, kWait, kCall };
  struct Node {
    Kind kind;
    HostStream* stream = nullptr;  // kWork, kRecord, kWait
    std::function<void()> work;    // kWork: the task; kCall: the call
    bool always_run = false;       // kWork
    Event* event = nullptr;        // kRecord, kWait (outlives the graph: the caller's)
  };
  std::vector<Node> nodes;
  std::vector<HostStream*> streams;                   // the captured streams
  std::shared_ptr<CachingAllocator::CapturePool> pool;  // the graph's memory
};

class HostGraph final : public StreamGraph {
 public:
  explicit HostGraph(std::unique_ptr<HostCapture> capture) : capture_(std::move(capture)) {}
  void launch(Stream& origin) override;
  int64_t nodes() const override { return static_cast<int64_t>(capture_->nodes.size()); }

 private:
  std::unique_ptr<HostCapture> capture_;
};

}  // namespace ls
