#include "programs/common/traced_batches.h"

#include <string>

#include <lockstep/clock.h>

namespace ls::programs {

data::PrefetchOptions traced_prefetch(Trainer& trainer) {
  data::PrefetchOptions options;
  options.on_gathered = [&trainer](int64_t epoch, int64_t index, int64_t begin_ns, int64_t end_ns) {
    trainer.trace_span("data loader",
                       "gather batch " + std::to_string(epoch) + "." + std::to_string(index),
                       begin_ns, end_ns);
  };
  return options;
}

void next_batch(data::Prefetcher& batches, data::Batch& batch, Trainer& trainer) {
  const int64_t waits = batches.waits();
  const int64_t begin_ns = steady_now_ns();
  if (!batches.next(batch)) batches.next(batch);  // an epoch ended: the next one is ready
  if (batches.waits() > waits) {
    trainer.trace_span(kCallerThread, "waiting for the next batch", begin_ns, steady_now_ns());
  }
}

}  // namespace ls::programs
