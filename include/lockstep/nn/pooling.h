// How a sequence becomes one vector (public): nn::pool (lockstep/nn/functional.h) and the
// transformer classifier's head (lockstep/transformer_config.h) take it. Pooling runs over the
// real (non-padding) tokens only: the last one (GPT-2's sequence classifier), the first (BERT's
// [CLS]), or their mean.
#pragma once

namespace ls::nn {

enum class Pooling { kLast, kFirst, kMean };

}  // namespace ls::nn
