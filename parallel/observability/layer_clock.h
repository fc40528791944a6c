// DeviceLayerClock: the LayerClock (lockstep/nn/autograd.h) a replica sets on its tapes while
// the run is traced (issue 25): every begin_layer/end_layer of the model, and where backward
// enters and leaves each layer, becomes a stamp of the device's clock (stamp_device_clock) in a
// marks tensor, in stream order, with its layer and point kept on the host in the same order.
// A step captured as a graph replays the stamps of the step it was captured from, into the same
// places, so the points of the last eager step (or capture) name the marks of every launch.
// Thread-safety: the replica's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/tensor.h>

namespace ls {

struct LayerStamp {
  std::string layer;  // "h.3", "0"
  LayerPoint point;
};
using LayerStamps = std::vector<LayerStamp>;

class DeviceLayerClock final : public LayerClock {
 public:
  // Stamps one step holds; a step with more (a very deep model, many micro-batches) keeps the
  // first ones.
  static constexpr int32_t kCapacity = 1024;
  explicit DeviceLayerClock(Device device);

  // The step body starts (eagerly or being captured): its stamps replace the last step's.
  void begin_step();
  void stamp(const std::string& name, LayerPoint point, Stream& stream) override;

  // i32 [2 * kCapacity]: the stamps' nanoseconds, in the order of points().
  const Tensor& marks() const { return marks_; }
  // What the stamps of the last step body were (shared, so a step's outcome can keep them).
  std::shared_ptr<const LayerStamps> points() const { return points_; }

 private:
  Tensor marks_;
  std::shared_ptr<LayerStamps> points_;
};

}  // namespace ls
