// Checkpoint tensor helpers (see parallel/runtime/checkpoint_tensors.h).
#include "parallel/runtime/checkpoint_tensors.h"

#include <cstring>

#include <lockstep/error.h>

namespace ls {

std::string model_description(const std::vector<std::string>& names,
                              const std::vector<Shape>& shapes) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += (out.empty() ? "" : " ") + names[i] + shape_str(shapes[i]);
  }
  return out;
}

void restore_tensor(const checkpoint::SafetensorsFile& file, const std::string& name,
                    const Shape& shape, float* dst) {
  const checkpoint::SafetensorsTensor& t = file.at(name);
  LS_CHECK(t.dtype == checkpoint::SafetensorsDType::kF32 && t.shape == shape, file.name(),
           ": tensor '", name, "' is ", checkpoint::safetensors_dtype_name(t.dtype),
           shape_str(t.shape), " but this model needs F32", shape_str(shape),
           "; the checkpoint was saved from a different model");
  std::memcpy(dst, t.data.data(), t.data.size());
}

void check_checkpoint_fits(const checkpoint::LoadedCheckpoint& loaded,
                           const std::string& optimizer, size_t parameters, size_t states) {
  LS_CHECK(loaded.meta.optimizer == optimizer, loaded.path, ": saved with optimizer '",
           loaded.meta.optimizer, "' but this run uses '", optimizer, "'");
  LS_CHECK(loaded.model.tensors().size() == parameters, loaded.model.name(), " holds ",
           loaded.model.tensors().size(), " tensors but this model has ", parameters,
           " parameters; the checkpoint was saved from a different model");
  LS_CHECK(loaded.optimizer.tensors().size() == parameters * states, loaded.optimizer.name(),
           " holds ", loaded.optimizer.tensors().size(), " tensors but this optimizer keeps ",
           states, " per parameter");
}

}  // namespace ls
