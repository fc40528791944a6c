// Module (public): a piece of a model with registered parameters and child modules, and the
// layers the MLP is built from (Linear, ReLU, GELU, Sequential).
//
// Writing a model: subclass Module; in the constructor register parameters (name, shape, init)
// and child modules; in forward() compute the output from the input with the functions of
// lockstep/nn/functional.h, reading each parameter through tape.parameter(p). Building a model
// only declares parameters: the engine then places them all in one flat value buffer and one flat
// gradient buffer on the replica's device, initialises them from the run's seed and keeps every
// replica's copy identical. A ModelFactory (lockstep/data_parallel.h) returning the model is all
// DataParallel needs; Pipeline also needs pipeline_layers(). forward() runs on a tape whose stream
// is on the model's device, and must compute the same thing for the same input rows whatever the
// other rows of the batch (no batch statistics): that is what makes N replicas equal one.
// Thread-safety: a Module is used by one thread (each replica owns its own copy).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/nn/autograd.h>
#include <lockstep/nn/inputs.h>
#include <lockstep/nn/parameter.h>

namespace ls::nn {

// One of a model's consecutive layers, as pipeline parallelism cuts them (lockstep/pipeline.h):
// forward(tape, x, model_input) maps the previous layer's output x (for the first layer, the
// model input itself) to this layer's output; model_input is the model's input for the same rows
// (token ids), for layers that need it (masks, shapes). `parameters` are every parameter forward
// uses, registration order; a parameter listed by two layers is shared (tied weights). Chaining
// every layer's forward computes exactly what Module::forward computes, op for op.
struct PipelineLayer {
  std::string name;
  std::vector<Parameter*> parameters;
  std::function<Var(Tape& tape, const Var& x, const Var& model_input)> forward;
};

class Module {
 public:
  virtual ~Module() = default;
  // The output for the rows of `inputs` (lockstep/nn/inputs.h). The engine calls this one.
  // Override it in a model with named inputs; by default it passes the one input to the
  // overload below.
  virtual Var forward(Tape& tape, const Inputs& inputs);
  // The output for a single input (images, token ids, or the previous layer's output): what a
  // model with one input, and every layer, overrides. By default it raises an error saying
  // that the module takes named inputs.
  virtual Var forward(Tape& tape, const Var& input);
  // The model as consecutive layers (see PipelineLayer); by default one layer, the whole module.
  // Valid while the module lives; parameter names are the full paths of parameters().
  virtual std::vector<PipelineLayer> pipeline_layers();
  // Every parameter: this module's own in registration order, then each child's (named
  // "child.param"), depth-first, children in registration order.
  std::vector<Parameter*> parameters();
  int64_t parameter_count();

 protected:
  Parameter& register_parameter(std::string name, Shape shape, Init init);
  template <typename M>
  M& register_module(std::string name, std::unique_ptr<M> module) {
    M& ref = *module;
    children_.push_back({std::move(name), std::move(module)});
    return ref;
  }

 private:
  void collect(const std::string& prefix, std::vector<Parameter*>& out);
  std::vector<std::unique_ptr<Parameter>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

// y = x W^T + b with W [out, in]; PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)).
class Linear final : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  using Module::forward;
  Var forward(Tape& tape, const Var& input) override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // The parameters, for a forward that fuses the bias into what follows (nn::bias_gelu) or ties
  // the weight to another layer. bias() is null for a Linear built without one.
  Parameter& weight() { return weight_; }
  Parameter* bias() { return bias_; }

 private:
  int64_t in_, out_;
  Parameter& weight_;
  Parameter* bias_;
};

class ReLU final : public Module {
 public:
  using Module::forward;
  Var forward(Tape& tape, const Var& input) override;
};

class GELU final : public Module {
 public:
  using Module::forward;
  Var forward(Tape& tape, const Var& input) override;
};

// Runs its children in order. Each child is a layer of the trace (Tape::begin_layer: "0", "1",
// ...) and a recomputable layer (Tape::recomputable): under Recompute::kBlocks every child runs
// its forward again in backward, so a child must compute the same function both times, and
// layers marked inside a child do not show on the trace then. It saves memory where a child's
// intermediates outweigh its input (a block of several ops); an MLP's Linear and activation
// layers keep about their input anyway, so there it only costs the second forward.
class Sequential final : public Module {
 public:
  Sequential& add(std::unique_ptr<Module> module);  // named by position: "0", "1", ...
  using Module::forward;
  Var forward(Tape& tape, const Var& input) override;
  // One layer per child, named by position.
  std::vector<PipelineLayer> pipeline_layers() override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<Module*> layers_;
};

// The parameters of `all` whose names start with `prefix` ("h.3."), in their order.
std::vector<Parameter*> parameters_under(const std::vector<Parameter*>& all,
                                         const std::string& prefix);

enum class Activation { kReLU, kGELU };

// Linear layers of the given widths with an activation between them, e.g. mlp({784, 256, 10}).
std::unique_ptr<Sequential> mlp(const std::vector<int64_t>& widths,
                                Activation activation = Activation::kReLU);

}  // namespace ls::nn
