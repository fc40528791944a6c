// kernels_for(device): the kernel table of the backend a device belongs to. cuda_kernels() comes
// from ops/cuda/ in a CUDA build and from engine/no_cuda/ (which throws, saying so) otherwise.
#include "engine/core/error.h"
#include "ops/kernels.h"

namespace ls {

const Kernels& kernels_for(Device device) {
  switch (device.kind) {
    case DeviceKind::kHost:
      return host_kernels();
    case DeviceKind::kCuda:
      return cuda_kernels();
  }
  LS_THROW("internal error (please report): kernels_for got unknown device kind ",
           static_cast<int>(device.kind));
}

}  // namespace ls
