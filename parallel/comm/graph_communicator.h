// GraphAwareCommunicator: the outermost layer of a replica's communicator, so that a captured
// step's collectives are made again at each graph launch on backends whose graphs cannot hold a
// collective themselves (the host backend: DeviceRuntime::capture_call).
//
// While the replica captures (set_capture), each collective, label and group bracket is handed
// to the runtime as a call to make again, in order, at every launch; the whole chain under it
// (test decorators, the flight recorder, the backend) then runs at each launch exactly as in an
// eager step, so desync checks, the watchdog's records and failure injection see every replayed
// collective. On CUDA, capture_call declines and the call goes through now: NCCL's kernels are
// captured into the CUDA graph like any other kernel.
// Thread-safety: the replica's thread only.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "engine/core/runtime.h"
#include "parallel/comm/communicator.h"

namespace ls {

class GraphAwareCommunicator final : public CommunicatorDecorator {
 public:
  using CommunicatorDecorator::CommunicatorDecorator;

  // The stream being captured (null: none). Group brackets have no stream of their own; they go
  // into this one's capture.
  void set_capture(Stream* stream) { capture_ = stream; }

  void label_next(std::string label) override { label_ = std::move(label); }
  void group_start() override {
    defer_or_run([this] { inner().group_start(); });
  }
  void group_end() override {
    defer_or_run([this] { inner().group_end(); });
  }

 protected:
  void issue(CollectiveDesc desc, Stream& stream) override {
    std::string label = std::exchange(label_, std::string());
    auto call = [this, desc, &stream, label] {
      if (!label.empty()) inner().label_next(label);
      issue_collective(inner(), desc, stream);
    };
    if (!device_runtime(stream.device()).capture_call(stream, call)) call();
  }

 private:
  template <typename Call>
  void defer_or_run(Call call) {
    if (capture_ == nullptr || !device_runtime(capture_->device()).capture_call(*capture_, call)) {
      call();
    }
  }

  Stream* capture_ = nullptr;
  std::string label_;
};

}  // namespace ls
