// phase_name (see parallel/runtime/phase.h).
#include "parallel/runtime/phase.h"

namespace ls {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kIdle: return "idle";
    case Phase::kSetup: return "setup";
    case Phase::kUpload: return "upload";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kReduce: return "gradient all-reduce";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kEvaluate: return "evaluate";
    case Phase::kDevice: return "device work";
  }
  return "?";
}

}  // namespace ls
