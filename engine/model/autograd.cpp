// Tape-based autograd (see lockstep/nn/autograd.h).
#include <lockstep/nn/autograd.h>

#include <algorithm>
#include <tuple>
#include <unordered_set>

#include <lockstep/error.h>
#include <lockstep/nn/parameter.h>

namespace ls {

Var Tape::constant(Tensor value) const {
  auto v = std::make_shared<VarNode>();
  v->value = std::move(value);
  return v;
}

Var Tape::differentiable_input(Tensor value) const {
  Var v = constant(std::move(value));
  v->requires_grad = record_;
  return v;
}

Var Tape::parameter(Parameter& parameter) {
  if (parameters_from_ != nullptr) {  // a recomputed layer's first forward: the outer tape's Var
    Var v = parameters_from_->parameter(parameter);
    parameter_vars_.try_emplace(&parameter, v);
    return v;
  }
  const bool gathered = !parameter.value.defined() && source_ != nullptr;
  LS_CHECK(parameter.value.defined() || gathered, "parameter '", parameter.name,
           "' has no storage; build a ParameterStore over the model before running it");
  LS_CHECK(!record_ || parameter.grad.defined() || grad_storage_, "parameter '", parameter.name,
           "' has no gradient storage: its ParameterStore keeps no flat gradient buffer, so set "
           "the tape's GradStorage (Tape::set_grad_storage) before the forward pass");
  auto [it, inserted] = parameter_vars_.try_emplace(&parameter);
  if (inserted) {
    auto v = std::make_shared<VarNode>();
    v->value = gathered ? source_->gather(parameter) : parameter.value;
    v->gathered = gathered;
    v->grad = parameter.grad;
    if (!v->grad.defined()) v->grad_storage = &grad_storage_;
    v->grad_written = true;  // parameter gradients are always added to (their storage is zeroed)
    v->requires_grad = record_;
    v->parameter = &parameter;
    it->second = std::move(v);
  } else if (!it->second->value.defined()) {  // dropped at a layer's end, used again (tied)
    it->second->value = source_->gather(parameter);
  }
  return it->second;
}

Var Tape::output(Tensor value, std::initializer_list<const Var*> inputs) const {
  auto v = std::make_shared<VarNode>();
  v->value = std::move(value);
  if (record_) {
    for (const Var* input : inputs) v->requires_grad = v->requires_grad || (*input)->requires_grad;
  }
  return v;
}

void Tape::record(const Var& output, std::vector<Var> inputs,
                  std::function<void(const Tensor& dy)> backward) {
  if (!record_ || !output->requires_grad) return;
  for (const Var& input : inputs) {
    ++input->uses;
    if (input->parameter != nullptr) ++input->pending_uses;
  }
  nodes_.push_back({output, std::move(inputs), std::move(backward), Tensor(), false});
}

bool Tape::begin_grad(VarNode& v) {
  if (!v.grad.defined() && v.grad_storage != nullptr) {
    v.grad = (*v.grad_storage)(*v.parameter);
    LS_ASSERT(v.grad.shape() == v.value.shape(), "gradient storage ", v.grad.describe(),
              " for parameter ", v.value.describe());
  }
  // An activation stored in bf16 (a bf16 step's) gets an f32 gradient, like every other one.
  const DType grad_dtype = v.value.dtype() == DType::kBF16 ? DType::kF32 : v.value.dtype();
  if (!v.grad.defined()) v.grad = Tensor::empty(v.value.shape(), grad_dtype, v.value.device());
  const bool add = v.grad_written;
  v.grad_written = true;
  return add;
}

void Tape::backward(const Var& root, const Tensor& root_grad) {
  LS_CHECK(weight_nodes_.empty(), "backward(): the weight gradients of a backward_input() are "
           "still to compute; call backward_weights() first");
  run_backward(root, root_grad, Part::kAll);
}

void Tape::backward_input(const Var& root, const Tensor& root_grad) {
  LS_CHECK(weight_nodes_.empty(), "backward_input(): the weight gradients of the previous "
           "backward_input() are still to compute; call backward_weights() first");
  run_backward(root, root_grad, Part::kInputs);
}

namespace {

// Hides a node's inputs that are parameters (or those that are not) from its closure for as long
// as it lives: requires_grad unset, so the closure computes only the other gradients, and the
// gradient itself set aside, so a closure that writes it anyway (an op that does not honour
// requires_grad) is caught by check() instead of adding its contribution twice.
class HideGradients {
 public:
  HideGradients(const std::vector<Var>& inputs, bool parameters) {
    hidden_.reserve(inputs.size());
    for (const Var& v : inputs) {
      if (!v->requires_grad || (v->parameter != nullptr) != parameters) continue;
      hidden_.push_back({v.get(), v->grad, v->grad_storage});
      v->requires_grad = false;
      v->grad = Tensor();
      v->grad_storage = nullptr;
    }
  }
  ~HideGradients() {
    for (const Hidden& h : hidden_) {
      h.var->requires_grad = true;
      h.var->grad = h.grad;
      h.var->grad_storage = h.grad_storage;
    }
  }
  HideGradients(const HideGradients&) = delete;
  HideGradients& operator=(const HideGradients&) = delete;

  // After the closure has run: it wrote none of the hidden gradients.
  void check() const {
    for (const Hidden& h : hidden_) {
      LS_CHECK(!h.var->grad.defined(), "a backward closure wrote the gradient of ",
               h.var->parameter != nullptr ? "parameter '" + h.var->parameter->name + "'"
                                           : std::string("an input"),
               " although that input's requires_grad was unset; a closure recorded with "
               "Tape::record must compute the gradients of the inputs whose requires_grad is "
               "set, and of no other (split backward runs it twice: Tape::backward_input)");
    }
  }

 private:
  struct Hidden {
    VarNode* var;
    Tensor grad;
    const std::function<Tensor(Parameter&)>* grad_storage;
  };
  std::vector<Hidden> hidden_;
};

}  // namespace

void Tape::run_backward(const Var& root, const Tensor& root_grad, Part part) {
  LS_CHECK(record_, "backward() on a tape that does not record (evaluation tape)");
  LS_CHECK(root->requires_grad, "backward(): the root does not depend on any parameter");
  if (root_grad.defined()) {
    LS_CHECK(root_grad.shape() == root->value.shape(), "backward(): root gradient ",
             root_grad.describe(), " does not match the root ", root->value.describe());
    root->grad = root_grad;
    root->grad_written = true;
  }
  part_ = part;
  if (source_ != nullptr) {
    const std::vector<Parameter*> order = gather_order();
    if (!order.empty()) source_->expect(order);  // a replay gathers nothing: keep the outer's
  }
  for (auto node = nodes_.rbegin(); node != nodes_.rend(); ++node) {
    if (node->output == nullptr) {  // a layer's mark (begin_layer, end_layer)
      node->backward(Tensor());
      node->backward = nullptr;
      continue;
    }
    // Nothing flowed into this output (it does not reach the root): skip its backward, but
    // still count the parameter uses so that every parameter's hook fires exactly once.
    const bool reached = node->output == root || node->output->grad.defined();
    if (reached) gather_inputs(*node);
    if (part == Part::kAll) {
      if (reached) node->backward(node->output->grad);
      finish_parameter_uses(*node);
      node->backward = nullptr;  // frees what the closure held as soon as it has run
      continue;
    }
    if (node->splits_itself) {  // a recomputed layer: its B now, its W in backward_weights
      if (reached) node->backward(node->output->grad);
      weight_nodes_.push_back({nullptr, std::move(node->inputs),
                               reached ? std::move(node->backward) : nullptr, Tensor(), true});
      node->backward = nullptr;
      continue;
    }
    bool to_parameters = false, to_others = false, uses_parameters = false;
    for (const Var& input : node->inputs) {
      uses_parameters = uses_parameters || input->parameter != nullptr;
      if (input->requires_grad) (input->parameter != nullptr ? to_parameters : to_others) = true;
    }
    if (reached && to_others) {
      HideGradients parameters(node->inputs, /*parameters=*/true);
      node->backward(node->output->grad);
      parameters.check();
    }
    if (uses_parameters) {  // its parameter gradients (or only its uses' count) for later
      const bool later = reached && to_parameters;
      weight_nodes_.push_back({nullptr, std::move(node->inputs),
                               later ? std::move(node->backward) : nullptr,
                               later ? node->output->grad : Tensor(), false});
    }
    node->backward = nullptr;
  }
  if (part == Part::kInputs) {
    // What the weight gradients keep until backward_weights: their inputs' values and their
    // output gradients (held by the nodes), not the gradients of intermediate inputs, which
    // would double what a micro-batch waiting for W holds. Leaves (differentiable_input) keep
    // theirs: the caller reads them.
    std::unordered_set<const VarNode*> intermediates;
    for (const Node& node : nodes_) intermediates.insert(node.output.get());
    for (const Node& node : weight_nodes_) {
      for (const Var& input : node.inputs) {
        if (input->parameter == nullptr && intermediates.count(input.get())) input->grad = Tensor();
      }
    }
  }
  nodes_.clear();
  part_ = Part::kAll;
}

void Tape::backward_weights() {
  part_ = Part::kWeights;
  try {
    for (Node& node : weight_nodes_) {
      if (node.backward) gather_inputs(node);
      if (node.backward && node.splits_itself) {
        node.backward(Tensor());  // its replay's backward_weights
      } else if (node.backward) {
        HideGradients others(node.inputs, /*parameters=*/false);
        node.backward(node.dy);
        others.check();
      }
      finish_parameter_uses(node);
      node = Node{};  // frees its closure's tensors now
    }
  } catch (...) {  // the tape is spent: what is left cannot run again (the step has failed)
    weight_nodes_.clear();
    part_ = Part::kAll;
    throw;
  }
  weight_nodes_.clear();
  part_ = Part::kAll;
}

void Tape::finish_parameter_uses(const Node& node) {
  for (const Var& input : node.inputs) {
    if (input->parameter == nullptr) continue;
    LS_ASSERT(input->pending_uses > 0);
    if (--input->pending_uses > 0) continue;
    if (grad_ready_hook_) grad_ready_hook_(*input->parameter);
    // Storage from GradStorage belongs to whoever handed it out (the Reducer frees a bucket's
    // staging once reduced): the tape lets go of it as soon as the gradient is final.
    if (input->grad_storage != nullptr) input->grad = Tensor();
    if (input->gathered) input->value = Tensor();  // its last use: the gathered copy goes
  }
}

void Tape::gather_inputs(const Node& node) {
  for (const Var& input : node.inputs) {
    if (input->gathered && !input->value.defined()) {
      input->value = source_->gather(*input->parameter);
    }
  }
}

void Tape::release_gathered() {
  if (borrows_parameters_) return;  // the outer tape's Vars: the outer tape decides
  for (auto& [parameter, var] : parameter_vars_) {
    if (var->gathered) var->value = Tensor();
  }
}

std::vector<Parameter*> Tape::gather_order() const {
  std::vector<Parameter*> order;
  std::unordered_set<const VarNode*> seen;
  for (auto node = nodes_.rbegin(); node != nodes_.rend(); ++node) {
    for (const Var& input : node->inputs) {
      if (input->gathered && !input->value.defined() && seen.insert(input.get()).second) {
        order.push_back(input->parameter);
      }
    }
  }
  return order;
}

void Tape::begin_layer(const std::string& name) {
  mark_layer(name, LayerPoint::kForwardBegin, LayerPoint::kBackwardEnd);
}

void Tape::end_layer(const std::string& name) {
  mark_layer(name, LayerPoint::kForwardEnd, LayerPoint::kBackwardBegin);
  release_gathered();
}

void Tape::mark_layer(const std::string& name, LayerPoint forward, LayerPoint backward) {
  if (layer_clock_ == nullptr || !record_) return;
  layer_clock_->stamp(name, forward, stream_);
  // Backward runs the nodes in reverse: a layer's begin mark runs after every node of the layer
  // (where its backward ends), its end mark before them (where its backward begins).
  LayerClock* clock = layer_clock_;
  Stream* stream = &stream_;
  nodes_.push_back({nullptr,
                    {},
                    [clock, stream, name, backward](const Tensor&) {
                      clock->stamp(name, backward, *stream);
                    },
                    Tensor(),
                    false});
}

// Note [Recomputed layers]
// The forward pass of a recomputable layer runs on a tape that records nothing: its
// intermediates are freed as it goes, and the tape learns which parameters it reads. On this
// tape one node stands for the whole layer, with the input and those parameters as its inputs,
// so each parameter's pending uses (and so its grad-ready hook, which starts the bucket's
// all-reduce) wait for the layer's backward. That backward replays the forward on a recording
// tape whose parameter Vars are this tape's own (the same gradient storage, the same use
// counts: they cannot reach zero there, as this tape's node still holds one use each), runs its
// backward from the layer's output gradient into the input's gradient as it stands (so an input
// also used after the layer sums its contributions in the plain run's order), and hands it back.
Var Tape::recomputable(const Var& input, Block block) {
  if (!record_ || !context_.recompute) return block(*this, input);
  ForwardContext inner = context_;
  inner.recompute = false;  // one level: the replay does not recompute again
  Tape forward_only(stream_, /*record=*/false);
  forward_only.set_context(inner);
  // Sharded parameters: the layer's parameters are gathered once, onto this tape's Vars, which
  // its backward then reads (Note [Sharded parameters], parameter_gather.cpp).
  if (source_ != nullptr) forward_only.parameters_from_ = this;
  forward_only.borrows_parameters_ = true;
  const Var first = block(forward_only, input);
  if (forward_only.step_dependent()) note_step_dependent();
  // In model order (not the map's, which follows addresses): every replica then finishes the
  // layer's parameters, and fires their hooks, in the same order.
  std::vector<Parameter*> used;
  for (const auto& [parameter, unused] : forward_only.parameter_vars_) used.push_back(parameter);
  std::sort(used.begin(), used.end(),
            [](const Parameter* a, const Parameter* b) {
              return std::tie(a->index, a->name) < std::tie(b->index, b->name);
            });
  std::vector<Var> inputs = {input};
  std::vector<Var> parameters;
  for (Parameter* p : used) {
    parameters.push_back(this->parameter(*p));
    inputs.push_back(parameters.back());
  }
  Var out = constant(first->value);
  out->requires_grad = input->requires_grad || !parameters.empty();
  // Split backward (backward_input, backward_weights) reaches this node twice: B replays the
  // layer and runs the replay's own B, keeping the replay; W runs the replay's W.
  record(out, std::move(inputs),
         [this, input, parameters, inner, block = std::move(block),
          replay = std::shared_ptr<Tape>()](const Tensor& dy) mutable {
           if (part_ == Part::kWeights) {
             if (replay) replay->backward_weights();
             replay.reset();
             return;
           }
           replay = std::make_shared<Tape>(stream_);
           replay->set_context(inner);
           replay->grad_storage_ = grad_storage_;  // what parameter() checks; the Vars are ours
           replay->source_ = source_;
           replay->borrows_parameters_ = true;
           for (const Var& p : parameters) replay->parameter_vars_[p->parameter] = p;
           const Var x = input->requires_grad ? replay->differentiable_input(input->value)
                                              : replay->constant(input->value);
           // The input's gradient so far (from its uses after the layer) is where the layer's
           // contributions go, one by one as in the plain run: the same sums in the same order.
           x->grad = input->grad;
           x->grad_written = input->grad_written;
           const Var y = block(*replay, x);
           if (!y->requires_grad) {  // nothing in the layer needs a gradient after all
             replay.reset();
             return;
           }
           if (part_ == Part::kInputs) {
             replay->backward_input(y, dy);
           } else {
             replay->backward(y, dy);
           }
           input->grad = x->grad;
           input->grad_written = x->grad_written;
           x->grad = Tensor();  // the replay's W (if kept) needs no input gradient
           if (part_ != Part::kInputs) replay.reset();
         });
  if (!nodes_.empty() && nodes_.back().output == out) nodes_.back().splits_itself = true;
  return out;
}

void Tape::clear() {
  nodes_.clear();
  weight_nodes_.clear();
  parameter_vars_.clear();
}

}  // namespace ls
