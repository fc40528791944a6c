// Inputs (public): the inputs a model's forward() gets for a run of rows, by name.
//
// A batch of images or token ids gives one input, named "input" (Inputs::kDefaultName); a batch
// of named inputs (lockstep/data/named_input.h) gives each under its name, in the batch's order,
// as a constant Var of shape [rows, shape...] and the input's dtype (f32 values, i32 ids, bf16
// values: nn::to_f32 widens them). Every Var holds the same rows.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <lockstep/nn/autograd.h>

namespace ls::nn {

class Inputs {
 public:
  static constexpr std::string_view kDefaultName = "input";

  Inputs() = default;
  // The one input of a batch of images or tokens.
  static Inputs single(Var input);

  void add(std::string name, Var value);
  // The input called `name`; raises ls::Error naming the inputs there are when there is none.
  const Var& operator[](std::string_view name) const;
  bool has(std::string_view name) const;
  // The one input; raises ls::Error when there are several (name them with operator[]).
  const Var& only() const;
  size_t size() const { return items_.size(); }
  const std::vector<std::pair<std::string, Var>>& items() const { return items_; }

 private:
  const Var* find(std::string_view name) const;  // null when absent
  std::string names() const;                      // "the inputs 'a', 'b'"
  std::vector<std::pair<std::string, Var>> items_;
};

}  // namespace ls::nn
