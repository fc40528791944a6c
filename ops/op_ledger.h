// The step ledger's recorder: what each op call launches on a GPU, with the bytes each launch must
// move and the FLOPs it must do, so that a step's time can be predicted at achievable rates with
// no GPU at hand (scripts/step-ledger, bench/ledger/). While an OpLedger lives it is the process's
// one active ledger, and every checked op (ops/<family>.h) reports to it through op_entry: the
// launches come from the op calls the step really makes, never from a list kept by hand.
// Each op describes its launches as the CUDA backend makes them (ops/cuda/<family>.cu); the
// emulated build checks those counts against the launches the CPU emulator sees
// (tests/ops/op_ledger_emulated_test.cpp). In a dry run the ops enqueue nothing, so a step of any
// size is walked through in seconds, on memory it allocates but never touches. Copies between two
// tensors of one device (Tensor::copy_from) are recorded too, as op "copy".
// A timed ledger (Options::timed) measures as well: before each op call on the first stream it
// sees, it records an event there, and measured() turns the events into each call's device time
// (from its event to the next one), summed per op and shape: the step's kernels timed where they
// run, on the step's own tensors (bench/ledger/main.cpp --measure on a GPU).
// Thread-safety: record() may be called from any thread; one ledger is active at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/stream.h>
#include <lockstep/tensor.h>

namespace ls {

// Which ceiling bounds a launch's arithmetic: memory-bound kernels have none that matters; GEMMs
// on 16-bit operands run on tensor cores; f32 GEMMs (no TF32) on the f32 units; fused attention
// on tensor cores, at the lower rate flash-style kernels reach (softmax between the products).
enum class LaunchRate : uint8_t { kMemory, kTensorCore, kF32Math, kFusedAttention };
// "memory", "tensor core", "f32", "fused attention"
const char* launch_rate_name(LaunchRate rate);

// One kernel or library call of an op, as the CUDA backend makes it.
struct Launch {
  std::string kernel;  // "cublasGemmEx bf16", "round_operand_kernel", "layernorm_forward_kernel"
  std::string shape;   // what sets its cost: "16384x2304x768 TN", "[16384, 768]"
  LaunchRate rate = LaunchRate::kMemory;
  double bytes = 0;  // read + written, each byte once: what a kernel at bandwidth moves
  double flops = 0;
};
using OpLaunches = std::vector<Launch>;

// What a timed ledger measured for one (op, first launch) over the recorded span: its calls, their
// device seconds, and the bytes and FLOPs of all their launches.
struct MeasuredRow {
  std::string op;
  Launch launch;  // the op's first launch; bytes and flops those of all its calls together
  int64_t calls = 0;
  double seconds = 0;
};

// One line of the ledger: the calls of one op that launched the same kernel on the same shape.
struct LedgerRow {
  std::string op;        // the checked op: "matmul", "layernorm"
  Launch launch;         // bytes and flops of one call
  int64_t count = 0;     // calls in the recorded span
  bool modelled = true;  // false: the op gave no launches (op_entry without a description)
};

class OpLedger {
 public:
  struct Options {
    bool dry_run = false;  // ops enqueue nothing (their results are garbage)
    // Ops choose as a backend of this kind would (planning_kind); unset: as their own device's.
    std::optional<DeviceKind> plan_as;
    bool timed = false;  // record an event before each op call (see above); not with dry_run
  };
  // Becomes the active ledger; an error if another one is.
  explicit OpLedger(Options options);
  ~OpLedger();  // stops being active
  OpLedger(const OpLedger&) = delete;
  OpLedger& operator=(const OpLedger&) = delete;

  bool dry_run() const { return options_.dry_run; }
  std::optional<DeviceKind> plan_as() const { return options_.plan_as; }
  // Adds one call of `op` that made these launches (none: it had nothing to do); a timed ledger
  // marks the call on `stream` when one is given.
  void record(const char* op, OpLaunches launches, const Stream* stream = nullptr);
  // Adds one call of an op that does not describe its launches (one row, modelled == false).
  void record_unmodelled(const char* op);
  // Forgets what was recorded (e.g. the warm-up step's allocations before the step to ledger).
  void clear();
  // Rows in the order their op was first recorded.
  std::vector<LedgerRow> rows() const;
  // A timed ledger: ends the span with an event on the timed stream, waits for it, and returns
  // each (op, first launch)'s calls and device time in the order first recorded; a call's time
  // runs from its event to the next call's (a copy or collective between two op calls counts in
  // the first). Empty when nothing was timed. Call it once, after the last op of the span.
  std::vector<MeasuredRow> measured();

 private:
  void add(const char* op, Launch launch, bool modelled);  // mutex_ held
  void mark(const char* op, const OpLaunches& launches, const Stream& stream);  // mutex_ held

  struct TimedCall {
    std::string op;
    Launch launch;
    std::unique_ptr<Event> start;
  };

  Options options_;
  mutable std::mutex mutex_;
  std::vector<LedgerRow> rows_;
  const Stream* timed_stream_ = nullptr;  // the first stream an op call was recorded on
  std::vector<TimedCall> calls_;
};

// The active ledger, or null. One relaxed load: ops ask on every call.
OpLedger* active_op_ledger();

// The device kind whose choices an op on a `actual` device makes: the active ledger's plan_as when
// it has one, else `actual`. Ops whose choice depends on the backend (which attention kernels,
// which block size) ask this, so a host dry run records the CUDA step.
DeviceKind planning_kind(DeviceKind actual);

// Helpers for the descriptions in ops/<family>.h.
namespace ledger {
double bytes(const Tensor& t);      // 0 for an undefined tensor
std::string dims(const Tensor& t);  // "[16384, 768]"
// A memory-bound launch over `elements` elements (shape "[elements]") moving `bytes`.
Launch elementwise(std::string kernel, int64_t elements, double bytes);
// A memory-bound launch moving the given tensors once each (shape: the first's).
Launch moves(std::string kernel, std::initializer_list<const Tensor*> tensors);
// A GEMM C[m, n] (+)= op(A) op(B) of `batch` products: operands of a_size/b_size bytes an element,
// C of c_size (read too when accumulating); 2mnk flops a product. shape "m x n x k NT" (N/T as
// op(A), op(B)), "x batch" when batched.
Launch gemm(std::string kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            int64_t batch, int a_size, int b_size, int c_size, bool reads_c, LaunchRate rate);
}  // namespace ledger

}  // namespace ls
