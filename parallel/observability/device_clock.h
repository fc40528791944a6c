// The offset of a device's clock from the host's steady clock (issue 25: every device on one
// time line). A stamp (stamp_device_clock), waited for, read right after the wait returns: exact
// to within the wait's latency (microseconds). Host devices stamp the steady clock itself: 0.
// Synchronizes `stream`.
#pragma once

#include <cstdint>

#include <lockstep/device.h>
#include <lockstep/stream.h>

namespace ls {

int64_t device_clock_offset_ns(Device device, Stream& stream);

}  // namespace ls
