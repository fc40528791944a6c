// Module, layers and the MLP builder (see lockstep/nn/module.h).
#include <lockstep/nn/module.h>

#include <cmath>

#include <lockstep/error.h>
#include <lockstep/nn/functional.h>

namespace ls::nn {

// ---- Inputs ------------------------------------------------------------------------------------

Inputs Inputs::single(Var input) {
  Inputs inputs;
  inputs.add(std::string(kDefaultName), std::move(input));
  return inputs;
}

void Inputs::add(std::string name, Var value) {
  LS_CHECK(!has(name), "the model's inputs already hold one named '", name, "'");
  items_.emplace_back(std::move(name), std::move(value));
}

const Var* Inputs::find(std::string_view name) const {
  for (const auto& [n, v] : items_) {
    if (n == name) return &v;
  }
  return nullptr;
}

bool Inputs::has(std::string_view name) const { return find(name) != nullptr; }

const Var& Inputs::operator[](std::string_view name) const {
  if (const Var* value = find(name)) return *value;
  LS_THROW("the model asks for input '", std::string(name), "', but the batch has ", names(),
           "; give the batch a named input of that name (data::Batch::inputs)");
}

const Var& Inputs::only() const {
  LS_CHECK(items_.size() == 1, "the model takes one input, but the batch has ", names(),
           "; override Module::forward(Tape&, const Inputs&) to read them by name");
  return items_.front().second;
}

std::string Inputs::names() const {
  if (items_.empty()) return "no inputs";
  std::string out = items_.size() == 1 ? "the input " : "the inputs ";
  for (size_t i = 0; i < items_.size(); ++i) out += (i > 0 ? ", '" : "'") + items_[i].first + "'";
  return out;
}

// ---- Module ------------------------------------------------------------------------------------

Var Module::forward(Tape& tape, const Inputs& inputs) { return forward(tape, inputs.only()); }

Var Module::forward(Tape&, const Var&) {
  LS_THROW("this module takes named inputs: call forward(tape, inputs) with an nn::Inputs, or "
           "override Module::forward(Tape&, const Var&) to take a single input");
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  collect("", out);
  return out;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += p->numel();
  return n;
}

void Module::collect(const std::string& prefix, std::vector<Parameter*>& out) {
  for (auto& p : parameters_) {
    // Names are full paths once collected; the registered name is the last component.
    const std::string leaf = p->name.substr(p->name.rfind('.') + 1);
    p->name = prefix + leaf;
    out.push_back(p.get());
  }
  for (auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<PipelineLayer> Module::pipeline_layers() {
  return {{"model", parameters(),
           [this](Tape& tape, const Var& x, const Var&) { return forward(tape, x); }}};
}

std::vector<Parameter*> parameters_under(const std::vector<Parameter*>& all,
                                         const std::string& prefix) {
  std::vector<Parameter*> out;
  for (Parameter* p : all) {
    if (p->name.compare(0, prefix.size(), prefix) == 0) out.push_back(p);
  }
  return out;
}

Parameter& Module::register_parameter(std::string name, Shape shape, Init init) {
  LS_CHECK(!name.empty() && name.find('.') == std::string::npos, "parameter name '", name,
           "' must be non-empty and contain no '.' (dots join module paths: register a child "
           "module for 'a.b', or name the parameter 'a_b')");
  for (int64_t d : shape) LS_CHECK(d > 0, "parameter '", name, "' has shape ", shape_str(shape));
  auto p = std::make_unique<Parameter>();
  p->name = std::move(name);
  p->shape = std::move(shape);
  p->init = init;
  parameters_.push_back(std::move(p));
  return *parameters_.back();
}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_(in_features),
      out_(out_features),
      weight_(register_parameter("weight", {out_features, in_features},
                                 Init::uniform(1.0f / std::sqrt(static_cast<float>(in_features))))),
      bias_(bias ? &register_parameter(
                       "bias", {out_features},
                       Init::uniform(1.0f / std::sqrt(static_cast<float>(in_features))))
                 : nullptr) {}

Var Linear::forward(Tape& tape, const Var& input) {
  Var w = tape.parameter(weight_);
  if (bias_ == nullptr) return linear(tape, input, w, nullptr);
  Var b = tape.parameter(*bias_);
  return linear(tape, input, w, &b);
}

Var ReLU::forward(Tape& tape, const Var& input) { return relu(tape, input); }
Var GELU::forward(Tape& tape, const Var& input) { return gelu(tape, input); }

Sequential& Sequential::add(std::unique_ptr<Module> module) {
  layers_.push_back(&register_module(std::to_string(layers_.size()), std::move(module)));
  return *this;
}

namespace {
// A child's forward, recomputed in backward when the run asks for it (Tape::recomputable).
Var run_child(Tape& tape, Module* layer, const Var& x) {
  return tape.recomputable(x, [layer](Tape& t, const Var& in) { return layer->forward(t, in); });
}
}  // namespace

Var Sequential::forward(Tape& tape, const Var& input) {
  Var x = input;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string name = std::to_string(i);
    tape.begin_layer(name);
    x = run_child(tape, layers_[i], x);
    tape.end_layer(name);
  }
  return x;
}

std::vector<PipelineLayer> Sequential::pipeline_layers() {
  const std::vector<Parameter*> all = parameters();  // full paths: "0.weight", ...
  std::vector<PipelineLayer> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Module* layer = layers_[i];
    out.push_back(
        {std::to_string(i), parameters_under(all, std::to_string(i) + "."),
         [layer](Tape& tape, const Var& x, const Var&) { return run_child(tape, layer, x); }});
  }
  return out;
}

std::unique_ptr<Sequential> mlp(const std::vector<int64_t>& widths, Activation activation) {
  LS_CHECK(widths.size() >= 2, "mlp needs at least an input and an output width, got ",
           widths.size(), " width(s)");
  for (int64_t w : widths) LS_CHECK(w > 0, "mlp widths must be positive, got ", w);
  auto model = std::make_unique<Sequential>();
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    model->add(std::make_unique<Linear>(widths[i], widths[i + 1]));
    if (i + 2 < widths.size()) {
      if (activation == Activation::kReLU) {
        model->add(std::make_unique<ReLU>());
      } else {
        model->add(std::make_unique<GELU>());
      }
    }
  }
  return model;
}

}  // namespace ls::nn
