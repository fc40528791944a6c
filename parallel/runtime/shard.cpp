// Shard (see parallel/runtime/shard.h).
#include "parallel/runtime/shard.h"

#include <lockstep/data/dataset.h>

namespace ls {

Shard Shard::slice(int64_t begin, int64_t count) const {
  Shard out = *this;
  if (images != nullptr) out.images = images + begin * features;
  if (tokens != nullptr) out.tokens = tokens + begin * features;
  if (labels != nullptr) out.labels = labels + begin * label_width;
  if (targets != nullptr) out.targets = targets + begin * label_width;
  out.rows = count;
  out.first_row = first_row + begin;
  return out;
}

int64_t Shard::counted_labels() const {
  if (labels == nullptr) return rows * label_width;  // value targets: every one is a term
  int64_t n = 0;
  for (int64_t i = 0; i < rows * label_width; ++i) n += labels[i] != data::kIgnoreLabel ? 1 : 0;
  return n;
}

}  // namespace ls
