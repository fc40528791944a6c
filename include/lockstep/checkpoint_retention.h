// Which checkpoints a checkpoint directory keeps (public: DataParallel::save takes it).
//
// After each commit, the checkpoints older than the new one are pruned down to the newest
// `keep_last` (the new one counts as one), plus every checkpoint whose step is a multiple of
// `keep_every`. The checkpoint `latest` names is never removed, nor is any with a higher step
// (those belong to another timeline, e.g. a run resumed from an older checkpoint, and are
// replaced when this run reaches their step).
#pragma once

#include <cstdint>

namespace ls {

struct CheckpointRetention {
  int keep_last = 3;       // the newest N checkpoints; 0 keeps every checkpoint
  int64_t keep_every = 0;  // > 0: also keep each checkpoint whose step is a multiple of this
};

}  // namespace ls
