// Backend tables for op families, and how a checked op finds its kernel.
//
// Each op family header (ops/activation.h, ...) declares a table: a struct of function pointers,
// one slot per kernel, each with a one-line contract. A backend fills the slots it implements in
// its own file (ops/host/<family>.cpp, ops/cuda/<family>.cu) and registers the table with
// LS_REGISTER_OP_TABLE; a slot left null, or a backend with no table (CUDA in a build without the
// toolkit), makes the op raise "not supported on this backend" instead of crashing.
// op_entry(&Table::slot, "op", stream) returns the kernel of the stream's backend.
// Thread-safety: tables register during static initialisation; lookups are lock-free after.
#pragma once

#include <array>
#include <type_traits>
#include <typeindex>

#include <lockstep/device.h>
#include <lockstep/stream.h>
#include "ops/op_ledger.h"

namespace ls {

inline constexpr int kDeviceKindCount = 2;  // DeviceKind::kHost, DeviceKind::kCuda

namespace detail {
// The process-wide registry, keyed by the table's type: one copy, in lockstep_ops.
bool register_op_table(std::type_index table, DeviceKind kind, const void* entries);
const void* find_op_table(std::type_index table, DeviceKind kind);
[[noreturn]] void throw_unsupported_op(const char* op, Device device);
}  // namespace detail

template <typename Table>
bool register_op_table(DeviceKind kind, const Table* entries) {
  return detail::register_op_table(std::type_index(typeid(Table)), kind, entries);
}

// The table `kind` registered for this family, or null. Tables register while lockstep_ops
// loads, before any op can run, so each family's tables are read from the registry once; every
// op call after that is an array read, with no lock on the step's path.
template <typename Table>
const Table* find_op_table(DeviceKind kind) {
  static const std::array<const Table*, kDeviceKindCount> tables = [] {
    std::array<const Table*, kDeviceKindCount> found{};
    for (int k = 0; k < kDeviceKindCount; ++k) {
      found[static_cast<size_t>(k)] = static_cast<const Table*>(detail::find_op_table(
          std::type_index(typeid(Table)), static_cast<DeviceKind>(k)));
    }
    return found;
  }();
  return tables[static_cast<size_t>(kind)];
}

namespace detail {
// A kernel of any slot's signature that does nothing: what a dry-running ledger's ops call.
template <typename Fn>
struct NoOpKernel;
template <typename R, typename... Args>
struct NoOpKernel<R (*)(Args...)> {
  static R run(Args...) {
    if constexpr (!std::is_void_v<R>) return R{};
  }
};
}  // namespace detail

// The kernel in `slot` for the stream's backend; "<op> is not supported on <device>" if absent.
// `describe` (a callable returning OpLaunches, ops/op_ledger.h) says what the call launches on a
// GPU; it is called only while a ledger records, and in a dry run the kernel returned does
// nothing. Without it a recording ledger counts the call as one it has no costs for.
template <typename Table, typename Fn, typename Describe>
Fn op_entry(Fn Table::*slot, const char* op, const Stream& stream, Describe&& describe) {
  if (OpLedger* ledger = active_op_ledger(); ledger != nullptr) [[unlikely]] {
    if constexpr (std::is_same_v<std::decay_t<Describe>, std::nullptr_t>) {
      ledger->record_unmodelled(op);
    } else {
      ledger->record(op, describe(), &stream);
    }
    // A dry run plans as another backend may (planning_kind): the op need not exist here.
    if (ledger->dry_run()) return &detail::NoOpKernel<Fn>::run;
  }
  const Table* table = find_op_table<Table>(stream.device().kind);
  if (table == nullptr || table->*slot == nullptr)
    detail::throw_unsupported_op(op, stream.device());
  return table->*slot;
}

template <typename Table, typename Fn>
Fn op_entry(Fn Table::*slot, const char* op, const Stream& stream) {
  return op_entry(slot, op, stream, nullptr);
}

}  // namespace ls

#define LS_OP_TABLE_CONCAT_(a, b) a##b
#define LS_OP_TABLE_CONCAT(a, b) LS_OP_TABLE_CONCAT_(a, b)
// In a backend file, at namespace scope: LS_REGISTER_OP_TABLE(ActivationOps, DeviceKind::kHost, kTable);
#define LS_REGISTER_OP_TABLE(Table, kind, entries)                                    \
  [[maybe_unused]] static const bool LS_OP_TABLE_CONCAT(ls_op_table_registered_, __LINE__) = \
      ::ls::register_op_table<Table>(kind, &(entries))
