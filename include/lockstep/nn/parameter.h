// A model parameter (public): a name, a shape, how to initialise it, and, once the engine has
// placed the model on its device, views of the model's flat parameter and gradient buffers.
// A model declares its parameters with Module::register_parameter (lockstep/nn/module.h) and uses
// them in forward() through tape.parameter(p); it never allocates or updates them itself.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <lockstep/tensor.h>

namespace ls {

struct Init {
  enum class Kind { kZeros, kOnes, kUniform, kNormal, kValues };
  Kind kind = Kind::kZeros;
  float scale = 0.0f;  // uniform: values in [-scale, scale]; normal: standard deviation
  // kValues: the parameter's values, row-major, exactly numel of them (pretrained weights).
  std::shared_ptr<const std::vector<float>> values;

  static Init zeros() { return {Kind::kZeros, 0.0f, nullptr}; }
  static Init ones() { return {Kind::kOnes, 0.0f, nullptr}; }
  static Init uniform(float bound) { return {Kind::kUniform, bound, nullptr}; }
  static Init normal(float stddev) { return {Kind::kNormal, stddev, nullptr}; }
  static Init from_values(std::shared_ptr<const std::vector<float>> v) {
    return {Kind::kValues, 0.0f, std::move(v)};
  }
};

struct Parameter {
  std::string name;    // dotted path, e.g. "layers.0.weight"
  Shape shape;
  Init init;
  int64_t offset = 0;  // elements from the start of the flat buffers
  int index = -1;      // position in ParameterStore::parameters()
  Tensor value;        // view of ParameterStore::values()
  Tensor grad;         // view of ParameterStore::grads()
  // In bf16 training: a bf16 view of the engine's copy of the values, exactly their bf16 rounding,
  // which bf16 products multiply with (rounded once per optimizer step, not in every product).
  // Undefined otherwise. Read-only, like value.
  Tensor value16;
  // A 2-D parameter may ask for room for padded_rows rows (> shape[0]): the engine then keeps
  // zeros after its values, and in bf16 training padded_value16 views the bf16 copy as
  // [padded_rows, cols], its extra rows zero (the transformers' padded vocabulary). value, grad,
  // value16, checkpoints and exports keep `shape`. 0: no room asked for.
  int64_t padded_rows = 0;
  Tensor padded_value16;

  int64_t numel() const { return shape_numel(shape); }
};

}  // namespace ls
