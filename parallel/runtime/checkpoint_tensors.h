// The checkpoint format's tensors, shared by DataParallel and Pipeline (internal): parameters
// under their module paths ("h.0.attn.qkv.weight"), optimizer state as "<parameter>.<state>"
// ("0.weight.exp_avg"), all F32 and whole, so that a checkpoint written by either loads into
// the other, at any device count, stage count or shard mode.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include <lockstep/tensor.h>
#include "engine/model/checkpoint/checkpoint.h"

namespace ls {

// The meta.json "model" text: "name[shape] name[shape] ..." in registration order.
std::string model_description(const std::vector<std::string>& names,
                              const std::vector<Shape>& shapes);

// Copies tensor `name` of `file` into dst (shape's element count) after checking its dtype and
// shape; a mismatch is an ls::Error saying the checkpoint was saved from a different model.
void restore_tensor(const checkpoint::SafetensorsFile& file, const std::string& name,
                    const Shape& shape, float* dst);

// Checks that `loaded` was saved with this optimizer and holds one model tensor per parameter
// and `states` optimizer tensors per parameter.
void check_checkpoint_fits(const checkpoint::LoadedCheckpoint& loaded,
                           const std::string& optimizer, size_t parameters, size_t states);

}  // namespace ls
