// A model parameter: a name, a shape, how to initialise it, and (once the model is
// materialised by a ParameterStore) views of the flat parameter and gradient buffers.
#pragma once

#include <string>

#include "engine/core/tensor.h"

namespace ls {

struct Init {
  enum class Kind { kZeros, kOnes, kUniform, kNormal };
  Kind kind = Kind::kZeros;
  float scale = 0.0f;  // uniform: values in [-scale, scale]; normal: standard deviation

  static Init zeros() { return {Kind::kZeros, 0.0f}; }
  static Init ones() { return {Kind::kOnes, 0.0f}; }
  static Init uniform(float bound) { return {Kind::kUniform, bound}; }
  static Init normal(float stddev) { return {Kind::kNormal, stddev}; }
};

struct Parameter {
  std::string name;    // dotted path, e.g. "layers.0.weight"
  Shape shape;
  Init init;
  int64_t offset = 0;  // elements from the start of the flat buffers
  int index = -1;      // position in ParameterStore::parameters()
  Tensor value;        // view of ParameterStore::values()
  Tensor grad;         // view of ParameterStore::grads()

  int64_t numel() const { return shape_numel(shape); }
};

}  // namespace ls
