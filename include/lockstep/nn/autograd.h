// Tape-based reverse-mode autograd (public): what a model's forward() records and backward runs.
//
// A Var is a value tensor plus, once backward reaches it, a gradient. The functions of
// lockstep/nn/functional.h compute their outputs on the tape's stream and record a backward
// closure; Tape::backward() runs the closures in reverse order. Gradients are accumulated: the
// first contribution to an intermediate Var writes its gradient, later ones add to it; a
// parameter's gradient is its view of the model's flat gradient buffer and is always added to
// (the engine zeroes that buffer once per step, or not, to accumulate micro-batches). When the
// engine shards gradients (ZeRO-2) a parameter has no gradient view and gets its storage from the
// tape's GradStorage when backward first reaches it.
// Parameter hooks: after the last recorded use of a parameter has been back-propagated, the
// grad-ready hook fires with that parameter, in the order gradients become final; data parallel
// training starts a bucket's all-reduce from it while backward goes on.
// Sharded parameters (ZeRO-3): when the engine keeps only a range of the parameters on each
// device, a parameter has no `value` of its own, and the tape gets its whole value from a
// ParameterSource while it needs it: from its first use in forward to the end of the layer using
// it (end_layer), and in backward from the first node that reads it to its last use.
// Everything is enqueued on the tape's stream; nothing here synchronizes.
// Thread-safety: a Tape belongs to one thread (each replica's).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <lockstep/precision.h>
#include <lockstep/stream.h>
#include <lockstep/tensor.h>

namespace ls {

struct Parameter;

struct VarNode {
  Tensor value;
  Tensor grad;                  // undefined until backward reaches this Var
  bool requires_grad = false;
  bool grad_written = false;    // false: the next contribution writes rather than adds
  Parameter* parameter = nullptr;
  int pending_uses = 0;         // recorded uses not yet back-propagated (parameters only)
  // Parameters without a gradient view: where begin_grad gets the gradient (the tape's).
  const std::function<Tensor(Parameter&)>* grad_storage = nullptr;
  // A parameter without a value of its own: `value` was gathered from the tape's
  // ParameterSource and is dropped (left undefined) whenever the tape does not need it.
  bool gathered = false;
  // Set by the op that made this Var when its backward multiplies the gradient in bf16 only
  // (nn::linear and nn::mlp in bf16; a bias gradient then sums that bf16 gradient): a loss or an
  // add may then give it the gradient already rounded to bf16 (nn::cross_entropy in bf16,
  // nn::add when this Var has no other use), a bf16 `grad`, which that op reads as it is.
  bool bf16_grad_ok = false;
  int uses = 0;
  // `value` rounded to bf16, when the op that made it wrote that too in a bf16 step (LayerNorm,
  // bias + GELU, CUDA's attention): nn::linear multiplies with it instead of casting `value`.
  Tensor value16;  // ops recorded with this Var as an input (a bf16 gradient needs it to be one)
};
using Var = std::shared_ptr<VarNode>;

// Where a tape gets the whole value of a parameter that has none of its own (the engine's
// ZeRO-3, ShardMode::kParameters: each replica keeps one range of the flat values, and a
// parameter is gathered from the replicas owning it while a tape needs it). Gathers are
// collectives: every replica's tapes ask for the same parameters in the same order, which holds
// when the parameters a forward pass uses do not depend on its data.
class ParameterSource {
 public:
  virtual ~ParameterSource() = default;
  // p's whole value, ready for the work enqueued next on the tape's stream. The tape holds the
  // tensor while it needs it and then drops it.
  virtual Tensor gather(Parameter& p) = 0;
  // Backward will gather these parameters in this order, as far as its nodes are reached (a
  // hint, for prefetching).
  virtual void expect(const std::vector<Parameter*>& order) { (void)order; }
};

// Where a layer's forward and backward begin and end, for the engine's trace of a step
// (lockstep/trainer.h's TraceOptions).
enum class LayerPoint { kForwardBegin, kForwardEnd, kBackwardBegin, kBackwardEnd };
// Set on a tape by the engine while it traces: stamps the device's clock at `point` of layer
// `name`, in stream order.
class LayerClock {
 public:
  virtual ~LayerClock() = default;
  virtual void stamp(const std::string& name, LayerPoint point, Stream& stream) = 0;
};

// What a forward pass needs to know beyond its inputs: whether it trains (dropout is on only
// then) and where its rows sit in the global batch, so that a dropout mask is a function of
// (seed, step, global example index, position) and N replicas draw the masks of one replica.
struct ForwardContext {
  bool training = false;
  uint64_t seed = 0;      // the run's dropout seed
  int64_t step = 0;       // the optimizer step being computed
  int64_t first_row = 0;  // global index (in the step's batch) of this forward's first example
  // The precision of matrix products (lockstep/precision.h): kBF16/kF16 round their operands.
  Precision precision = Precision::kF32;
  // Activation checkpointing (--recompute blocks): layers run through Tape::recomputable keep
  // only their input and recompute their forward in backward.
  bool recompute = false;
  // Set by the engine in a bf16 training step whose loss is cross-entropy (fused into the step):
  // the model may hand its classifier's logits over in bf16 (nn::linear_bf16_output), which
  // nn::cross_entropy reads once and overwrites with their bf16 gradient. The built-in
  // transformers' heads do.
  bool logits_in_bf16 = false;
};

class Tape {
 public:
  // With record == false (evaluation), functions compute outputs and record nothing.
  explicit Tape(Stream& stream, bool record = true) : stream_(stream), record_(record) {}
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  Stream& stream() const { return stream_; }
  bool recording() const { return record_; }
  const ForwardContext& context() const { return context_; }
  void set_context(const ForwardContext& context) { context_ = context; }
  // Ops whose work depends on the step beyond the tensors they read (dropout masks are keyed by
  // the step number, a host value baked into their launch) say so here: such a step cannot be
  // replayed as a graph (docs/architecture.md, "Steps as graphs").
  void note_step_dependent() { step_dependent_ = true; }
  bool step_dependent() const { return step_dependent_; }
  // A model's layers, for the trace: begin_layer("h.3") before a layer's forward, end_layer
  // with the same name after it (Sequential and the built-in transformers do it for theirs).
  // They stamp the layer's forward, and record where backward enters and leaves the layer.
  // Without a LayerClock (the engine is not tracing) or on a tape that does not record, they
  // stamp nothing. end_layer also drops the parameter values gathered from a ParameterSource
  // (ZeRO-3): a model that marks no layers holds them until backward is done with them.
  void begin_layer(const std::string& name);
  void end_layer(const std::string& name);
  void set_layer_clock(LayerClock* clock) { layer_clock_ = clock; }

  // Runs one layer (a transformer block, a Sequential's child, a block of your model):
  // block(tape, input). When the context asks for recomputation (ForwardContext::recompute) and
  // the tape records, the layer's intermediates are not kept: its forward runs on a tape that
  // records nothing, and backward runs it again from the saved input, on a tape of its own,
  // before back-propagating through it. Gradients are bitwise those of the plain run: the same
  // kernels on the same values, and dropout masks are keyed by (seed, step, row, site), so the
  // second forward draws the same ones. `block` must compute the same function both times (no
  // state it changes) and is kept until backward: capture by value what it needs. Parameters
  // used inside count as used by the layer: their grad-ready hook fires once backward has passed
  // through it.
  using Block = std::function<Var(Tape& tape, const Var& input)>;
  Var recomputable(const Var& input, Block block);

  // A Var that needs no gradient (inputs, labels).
  Var constant(Tensor value) const;
  // An input whose gradient the caller wants (a pipeline stage's received activations): after
  // backward, ->grad is d(root)/d(input), or undefined when nothing flowed into it.
  Var differentiable_input(Tensor value) const;
  // The Var of a parameter: its value (or, without one, its value gathered from the
  // ParameterSource), with its gradient in the flat gradient buffer. The same Var is returned for
  // every use of the parameter on this tape.
  Var parameter(Parameter& parameter);
  // A Var for a new output; requires a gradient when any input does and the tape records.
  Var output(Tensor value, std::initializer_list<const Var*> inputs) const;

  // Records `backward(dy)` for `output`, to run when backward reaches it with its gradient dy.
  // The closure computes the gradient of each of its inputs whose requires_grad is set, and of
  // no other (backward_input and backward_weights run it with some of them unset).
  void record(const Var& output, std::vector<Var> inputs,
              std::function<void(const Tensor& dy)> backward);

  // Back-propagates from `root`, whose gradient is taken as given (`root_grad`); a loss whose
  // gradient was computed in forward (fused softmax + cross-entropy) passes an undefined tensor.
  void backward(const Var& root, const Tensor& root_grad = Tensor());
  // backward() in two parts, for zero-bubble pipeline schedules (lockstep/pipeline_schedule.h):
  // backward_input computes every gradient but the parameters' (B: what the previous stage waits
  // for) and keeps, for each recorded use of a parameter, its closure and output gradient;
  // backward_weights then computes the parameters' gradients (W), in backward()'s order, so the
  // parameter gradients are bitwise backward()'s, and fires their grad-ready hooks. Ops whose one
  // kernel makes both kinds of gradient (layernorm) run it in both parts; a recomputed layer
  // replays its forward once, in B, and keeps the replay for W. A closure that writes a gradient
  // it was not asked for is an ls::Error naming the input.
  void backward_input(const Var& root, const Tensor& root_grad = Tensor());
  void backward_weights();

  using GradReadyHook = std::function<void(Parameter&)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_hook_ = std::move(hook); }
  // For parameters whose `grad` is undefined: returns zeroed storage shaped like the parameter,
  // which this step's contributions are added to (called once per parameter per tape, when
  // backward first reaches it; the storage must stay valid until the grad-ready hook's user is
  // done with it; the tape drops its reference after the hook). Set it before the forward pass.
  using GradStorage = std::function<Tensor(Parameter&)>;
  void set_grad_storage(GradStorage storage) { grad_storage_ = std::move(storage); }

  // Parameters without a value of their own (ZeRO-3) are gathered from `source`, which must
  // outlive the tape's use of them. Set it before the forward pass.
  void set_parameter_source(ParameterSource* source) { source_ = source; }

  // Drops every recorded closure and intermediate; parameters are untouched.
  void clear();

  // For backward closures: prepares v's gradient for a contribution and says whether to add to
  // it (true) or write it (false). Allocates the gradient of an intermediate on first use.
  static bool begin_grad(VarNode& v);

 private:
  // Stamps `forward` now and records a node that stamps `backward` when backward reaches it.
  void mark_layer(const std::string& name, LayerPoint forward, LayerPoint backward);

  struct Node {
    Var output;
    std::vector<Var> inputs;
    std::function<void(const Tensor&)> backward;
    Tensor dy;  // a node kept for backward_weights: its output's gradient
    // A recomputed layer: split backward runs its closure in both parts, unhidden (it splits
    // its replay's backward itself, reading part_).
    bool splits_itself = false;
  };
  enum class Part { kAll, kInputs, kWeights };
  void run_backward(const Var& root, const Tensor& root_grad, Part part);
  // After a node's parameter gradients are done: counts down their uses and fires the hooks.
  void finish_parameter_uses(const Node& node);
  // Gathers the value of each of the node's parameter inputs that holds none (ZeRO-3).
  void gather_inputs(const Node& node);
  // Drops every gathered parameter value this tape holds (a layer's end in forward).
  void release_gathered();
  // The parameters backward will gather, in order (nodes_ run in reverse), for the source.
  std::vector<Parameter*> gather_order() const;

  Stream& stream_;
  bool record_;
  ForwardContext context_;
  bool step_dependent_ = false;
  std::vector<Node> nodes_;
  std::vector<Node> weight_nodes_;  // backward_input's, for backward_weights, in backward order
  Part part_ = Part::kAll;          // the backward running now
  // One Var per parameter per tape, so a parameter used twice (tied weights) has one use count.
  std::unordered_map<Parameter*, Var> parameter_vars_;
  GradReadyHook grad_ready_hook_;
  GradStorage grad_storage_;
  ParameterSource* source_ = nullptr;
  Tape* parameters_from_ = nullptr;  // recomputable's forward-only tape under a source: the outer
  // A recomputed layer's tapes (its forward-only pass and its replay) hold the outer tape's
  // parameter Vars: a layer marked inside the block must not drop their gathered values.
  bool borrows_parameters_ = false;
  LayerClock* layer_clock_ = nullptr;
};

}  // namespace ls
