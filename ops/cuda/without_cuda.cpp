// The CUDA kernel table of a build without the CUDA backend: asking for it raises ls::Error.
#include "engine/core/error.h"
#include "ops/kernels.h"

namespace ls {

const Kernels& cuda_kernels() {
  LS_THROW("no CUDA kernels: lockstep was built without the CUDA backend (configure with the "
           "CUDA toolkit and NCCL installed, -DLOCKSTEP_CUDA=ON)");
}

}  // namespace ls
