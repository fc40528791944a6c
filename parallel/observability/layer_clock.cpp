#include "parallel/observability/layer_clock.h"

#include "ops/step_control.h"

namespace ls {

DeviceLayerClock::DeviceLayerClock(Device device)
    : marks_(Tensor::empty({2 * static_cast<int64_t>(kCapacity)}, DType::kI32, device)),
      points_(std::make_shared<LayerStamps>()) {}

void DeviceLayerClock::begin_step() {
  // A fresh list: an earlier step's outcome may still hold the old one.
  points_ = std::make_shared<LayerStamps>();
}

void DeviceLayerClock::stamp(const std::string& name, LayerPoint point, Stream& stream) {
  if (points_->size() >= static_cast<size_t>(kCapacity)) return;
  stamp_device_clock(marks_, static_cast<int32_t>(points_->size()), stream);
  points_->push_back({name, point});
}

}  // namespace ls
