// Tape-based autograd (see lockstep/nn/autograd.h).
#include <lockstep/nn/autograd.h>

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
  LS_CHECK(parameter.value.defined(), "parameter '", parameter.name,
           "' has no storage; build a ParameterStore over the model before running it");
  LS_CHECK(!record_ || parameter.grad.defined() || grad_storage_, "parameter '", parameter.name,
           "' has no gradient storage: its ParameterStore keeps no flat gradient buffer, so set "
           "the tape's GradStorage (Tape::set_grad_storage) before the forward pass");
  auto [it, inserted] = parameter_vars_.try_emplace(&parameter);
  if (inserted) {
    auto v = std::make_shared<VarNode>();
    v->value = parameter.value;
    v->grad = parameter.grad;
    if (!v->grad.defined()) v->grad_storage = &grad_storage_;
    v->grad_written = true;  // parameter gradients are always added to (their storage is zeroed)
    v->requires_grad = record_;
    v->parameter = &parameter;
    it->second = std::move(v);
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
    if (input->parameter != nullptr) ++input->pending_uses;
  }
  nodes_.push_back({output, std::move(inputs), std::move(backward)});
}

bool Tape::begin_grad(VarNode& v) {
  if (!v.grad.defined() && v.grad_storage != nullptr) {
    v.grad = (*v.grad_storage)(*v.parameter);
    LS_ASSERT(v.grad.shape() == v.value.shape(), "gradient storage ", v.grad.describe(),
              " for parameter ", v.value.describe());
  }
  if (!v.grad.defined()) v.grad = Tensor::empty(v.value.shape(), v.value.dtype(), v.value.device());
  const bool add = v.grad_written;
  v.grad_written = true;
  return add;
}

void Tape::backward(const Var& root, const Tensor& root_grad) {
  LS_CHECK(record_, "backward() on a tape that does not record (evaluation tape)");
  LS_CHECK(root->requires_grad, "backward(): the root does not depend on any parameter");
  if (root_grad.defined()) {
    LS_CHECK(root_grad.shape() == root->value.shape(), "backward(): root gradient ",
             root_grad.describe(), " does not match the root ", root->value.describe());
    root->grad = root_grad;
    root->grad_written = true;
  }
  for (auto node = nodes_.rbegin(); node != nodes_.rend(); ++node) {
    if (node->output == nullptr) {  // a layer's mark (begin_layer, end_layer)
      node->backward(Tensor());
      node->backward = nullptr;
      continue;
    }
    // Nothing flowed into this output (it does not reach the root): skip its backward, but
    // still count the parameter uses so that every parameter's hook fires exactly once.
    if (node->output == root || node->output->grad.defined()) node->backward(node->output->grad);
    for (const Var& input : node->inputs) {
      if (input->parameter == nullptr) continue;
      LS_ASSERT(input->pending_uses > 0);
      if (--input->pending_uses > 0) continue;
      if (grad_ready_hook_) grad_ready_hook_(*input->parameter);
      // Storage from GradStorage belongs to whoever handed it out (the Reducer frees a bucket's
      // staging once reduced): the tape lets go of it as soon as the gradient is final.
      if (input->grad_storage != nullptr) input->grad = Tensor();
    }
    node->backward = nullptr;  // frees what the closure held as soon as it has run
  }
  nodes_.clear();
}

void Tape::begin_layer(const std::string& name) {
  mark_layer(name, LayerPoint::kForwardBegin, LayerPoint::kBackwardEnd);
}

void Tape::end_layer(const std::string& name) {
  mark_layer(name, LayerPoint::kForwardEnd, LayerPoint::kBackwardBegin);
}

void Tape::mark_layer(const std::string& name, LayerPoint forward, LayerPoint backward) {
  if (layer_clock_ == nullptr || !record_) return;
  layer_clock_->stamp(name, forward, stream_);
  // Backward runs the nodes in reverse: a layer's begin mark runs after every node of the layer
  // (where its backward ends), its end mark before them (where its backward begins).
  LayerClock* clock = layer_clock_;
  Stream* stream = &stream_;
  nodes_.push_back({nullptr, {}, [clock, stream, name, backward](const Tensor&) {
                      clock->stamp(name, backward, *stream);
                    }});
}

void Tape::clear() {
  nodes_.clear();
  parameter_vars_.clear();
}

}  // namespace ls
