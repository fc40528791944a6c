// The step ledger's recorder (ops/op_ledger.h).
#include "ops/op_ledger.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include <lockstep/error.h>
#include "engine/core/copy_observer.h"
#include "engine/core/runtime.h"

namespace ls {
namespace {
std::atomic<OpLedger*> g_active{nullptr};
}  // namespace

const char* launch_rate_name(LaunchRate rate) {
  switch (rate) {
    case LaunchRate::kMemory:
      return "memory";
    case LaunchRate::kTensorCore:
      return "tensor core";
    case LaunchRate::kF32Math:
      return "f32";
    case LaunchRate::kFusedAttention:
      return "fused attention";
  }
  return "?";
}

namespace {
// A copy between two tensors of one device (engine/core/copy_observer.h): a copy kernel on a GPU.
void record_copy(size_t bytes) {
  if (OpLedger* ledger = active_op_ledger()) {
    char shape[32];
    std::snprintf(shape, sizeof shape, "%zu bytes", bytes);
    ledger->record("copy", {Launch{"cudaMemcpyAsync (device to device)", shape,
                                   LaunchRate::kMemory, 2.0 * static_cast<double>(bytes), 0}});
  }
}
}  // namespace

OpLedger::OpLedger(Options options) : options_(options) {
  LS_CHECK(!(options.timed && options.dry_run),
           "OpLedger: a dry run enqueues nothing to time; "
           "ask for timed or dry_run, not both");
  OpLedger* none = nullptr;
  LS_CHECK(g_active.compare_exchange_strong(none, this),
           "an OpLedger is already recording; "
           "end it before starting another (one ledger records at a time)");
  detail::set_copy_observer(record_copy);
}

OpLedger::~OpLedger() {
  detail::set_copy_observer(nullptr);
  g_active.store(nullptr);
}

void OpLedger::record_unmodelled(const char* op) {
  std::lock_guard lock(mutex_);
  add(op, Launch{"(no cost description)", "", LaunchRate::kMemory, 0, 0}, false);
}

void OpLedger::record(const char* op, OpLaunches launches, const Stream* stream) {
  std::lock_guard lock(mutex_);
  if (options_.timed && stream != nullptr) mark(op, launches, *stream);
  for (Launch& launch : launches) add(op, std::move(launch), true);
}

void OpLedger::add(const char* op, Launch launch, bool modelled) {
  {
    for (LedgerRow& row : rows_) {
      if (row.op == op && row.launch.kernel == launch.kernel && row.launch.shape == launch.shape) {
        ++row.count;
        return;
      }
    }
    rows_.push_back(LedgerRow{op, std::move(launch), 1, modelled});
  }
}

void OpLedger::mark(const char* op, const OpLaunches& launches, const Stream& stream) {
  if (timed_stream_ == nullptr) timed_stream_ = &stream;
  if (&stream != timed_stream_ || launches.empty()) return;  // one stream's calls are timed
  TimedCall call{op, launches.front(), device_runtime(stream.device()).create_event()};
  for (size_t i = 1; i < launches.size(); ++i) {
    call.launch.bytes += launches[i].bytes;
    call.launch.flops += launches[i].flops;
  }
  // Recording an event changes nothing the op's work can see; the op holds its stream const.
  const_cast<Stream&>(stream).record(*call.start);
  calls_.push_back(std::move(call));
}

std::vector<MeasuredRow> OpLedger::measured() {
  std::lock_guard lock(mutex_);
  std::vector<MeasuredRow> out;
  if (calls_.empty()) return out;
  std::unique_ptr<Event> end = device_runtime(timed_stream_->device()).create_event();
  const_cast<Stream*>(timed_stream_)->record(*end);
  end->synchronize();
  for (size_t i = 0; i < calls_.size(); ++i) {
    const Event& next = i + 1 < calls_.size() ? *calls_[i + 1].start : *end;
    const double seconds = next.elapsed_ms_since(*calls_[i].start) * 1e-3;
    const TimedCall& call = calls_[i];
    auto row = std::find_if(out.begin(), out.end(), [&](const MeasuredRow& r) {
      return r.op == call.op && r.launch.kernel == call.launch.kernel &&
             r.launch.shape == call.launch.shape;
    });
    if (row == out.end()) {
      out.push_back(MeasuredRow{call.op, call.launch, 0, 0});
      row = out.end() - 1;
      row->launch.bytes = row->launch.flops = 0;
    }
    ++row->calls;
    row->seconds += seconds;
    row->launch.bytes += call.launch.bytes;
    row->launch.flops += call.launch.flops;
  }
  calls_.clear();
  return out;
}

void OpLedger::clear() {
  std::lock_guard lock(mutex_);
  rows_.clear();
  calls_.clear();
}

std::vector<LedgerRow> OpLedger::rows() const {
  std::lock_guard lock(mutex_);
  return rows_;
}

OpLedger* active_op_ledger() { return g_active.load(std::memory_order_relaxed); }

DeviceKind planning_kind(DeviceKind actual) {
  const OpLedger* ledger = active_op_ledger();
  return ledger != nullptr && ledger->plan_as() ? *ledger->plan_as() : actual;
}

namespace ledger {

double bytes(const Tensor& t) { return t.defined() ? static_cast<double>(t.nbytes()) : 0.0; }

std::string dims(const Tensor& t) { return t.defined() ? shape_str(t.shape()) : "[]"; }

Launch elementwise(std::string kernel, int64_t elements, double bytes) {
  char shape[32];  // snprintf: GCC 12 warns falsely on "[" + std::to_string(...) (-Wrestrict)
  std::snprintf(shape, sizeof shape, "[%lld]", static_cast<long long>(elements));
  return Launch{std::move(kernel), shape, LaunchRate::kMemory, bytes, 0};
}

Launch moves(std::string kernel, std::initializer_list<const Tensor*> tensors) {
  Launch launch{std::move(kernel), "", LaunchRate::kMemory, 0, 0};
  for (const Tensor* t : tensors) {
    if (t == nullptr) continue;
    if (launch.shape.empty()) launch.shape = dims(*t);
    launch.bytes += bytes(*t);
  }
  return launch;
}

Launch gemm(std::string kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
            int64_t batch, int a_size, int b_size, int c_size, bool reads_c, LaunchRate rate) {
  char shape[96];
  const int written =
      std::snprintf(shape, sizeof shape, "%lldx%lldx%lld %c%c", static_cast<long long>(m),
                    static_cast<long long>(n), static_cast<long long>(k), trans_a ? 'T' : 'N',
                    trans_b ? 'T' : 'N');
  if (batch != 1) {
    std::snprintf(shape + written, sizeof shape - static_cast<size_t>(written), " x%lld",
                  static_cast<long long>(batch));
  }
  const double mn = static_cast<double>(m) * static_cast<double>(n);
  const double per_product = static_cast<double>(m * k) * a_size +
                             static_cast<double>(k * n) * b_size + mn * c_size * (reads_c ? 2 : 1);
  return Launch{std::move(kernel), shape, rate, per_product * static_cast<double>(batch),
                2.0 * mn * static_cast<double>(k) * static_cast<double>(batch)};
}

}  // namespace ledger
}  // namespace ls
