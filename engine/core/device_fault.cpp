// The one message of an out-of-range value, whichever backend found it (engine/core/device_fault.h).
#include "engine/core/device_fault.h"

#include <lockstep/error.h>

namespace ls {

std::string describe_out_of_range(const char* op, const char* what, int64_t index, int64_t value,
                                  int64_t limit, const char* hint) {
  return detail::concat(op, ": ", what, " ", value, " in row ", index, " is outside [0, ", limit,
                        "); ", hint);
}

}  // namespace ls
