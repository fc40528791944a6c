#include "parallel/observability/device_clock.h"

#include <chrono>

#include <lockstep/tensor.h>
#include "ops/step_control.h"

namespace ls {

int64_t device_clock_offset_ns(Device device, Stream& stream) {
  if (device.is_host()) return 0;
  const Tensor mark = Tensor::empty({2}, DType::kI32, device);
  stamp_device_clock(mark, 0, stream);
  int64_t stamped = 0;
  mark.copy_to_host_async(&stamped, sizeof stamped, stream);
  stream.synchronize();
  const int64_t host_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count();
  return host_ns - stamped;
}

}  // namespace ls
