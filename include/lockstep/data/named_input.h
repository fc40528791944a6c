// NamedInput (public): one input tensor of a batch, by name, of any dtype and per-example shape.
//
// A model with several inputs, or with inputs that are neither float features nor token ids,
// gets them this way: data::Batch::inputs holds one NamedInput per input. The engine cuts every
// input along its leading example dimension as it cuts the batch (each replica its rows, each
// micro-batch its part), uploads all of a replica's inputs in one copy, and gives the model's
// Module::forward(tape, inputs) an nn::Inputs (lockstep/nn/module.h) holding, under the same
// names, constant Vars of shape [rows, shape...] and the input's dtype.
// Contract: `bytes` holds size * numel(shape) values of `dtype` (the batch's size), example after
// example, each example row-major, in the machine's byte order; names are unique and not empty.
// A batch with named inputs has no images or tokens. DataParallel takes them (every device
// count, sharding, accumulation, precision, graphs); Pipeline does not yet (it refuses them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <lockstep/dtype.h>

namespace ls::data {

struct NamedInput {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // per example; {} is one value per example
  std::vector<uint8_t> bytes;  // size * numel(shape) values of dtype

  int64_t example_elements() const;  // numel(shape)
  size_t example_bytes() const {
    return static_cast<size_t>(example_elements()) * dtype_size(dtype);
  }

  // An input holding a copy of `values` (size * numel(shape) of them).
  static NamedInput f32(std::string name, std::vector<int64_t> shape,
                        std::span<const float> values);
  static NamedInput i32(std::string name, std::vector<int64_t> shape,
                        std::span<const int32_t> values);
  static NamedInput bf16(std::string name, std::vector<int64_t> shape,
                         std::span<const uint16_t> values);  // bf16 bit patterns (f32_to_bf16)
};

// Raises ls::Error when `inputs` do not hold `size` examples each (names empty or repeated, a
// dimension not positive, a byte count that is not size * example_bytes()), naming the input.
void check_named_inputs(const std::vector<NamedInput>& inputs, int64_t size);

}  // namespace ls::data
