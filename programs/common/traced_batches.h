// The data loader on the trace (issue 25): lockstep-train and lockstep-scale gather batches on a
// Prefetcher's thread; these put its work and the caller's waits for it on the trainer's trace
// (Trainer::trace_span), where they show beside the devices' steps. Without a trace they cost
// two clock reads per step and a span's name per batch on the loader's thread (well under a
// microsecond).
#pragma once

#include <lockstep/data/prefetch.h>
#include <lockstep/trainer.h>

namespace ls::programs {

// Options whose loader thread reports every batch it gathers ("gather batch E.I" on the track
// "data loader"). The trainer must outlive the Prefetcher built with them.
data::PrefetchOptions traced_prefetch(Trainer& trainer);

// Fills `batch` with the next prefetched batch, wrapping to the next epoch at the end of one; a
// wait for it shows on the caller's track as "waiting for the next batch".
void next_batch(data::Prefetcher& batches, data::Batch& batch, Trainer& trainer);

}  // namespace ls::programs
