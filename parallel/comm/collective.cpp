// CollectiveDesc's text form, fingerprint comparison and names (see parallel/comm/collective.h).
#include "parallel/comm/collective.h"

#include "ops/op_ledger.h"

#include <cstdio>

namespace ls {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
  }
  return "?";
}

bool same_collective(const CollectiveDesc& a, const CollectiveDesc& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.count == b.count && a.op == b.op &&
         a.root == b.root && a.seq == b.seq;
}

std::string describe(const CollectiveDesc& desc) {
  std::string out(collective_name(desc.kind));
  if (desc.seq != 0) out += " #" + std::to_string(desc.seq);
  out += " (";
  if (!desc.label.empty()) out += desc.label + ", ";
  out += format_bytes(static_cast<double>(desc.bytes())) + ") [";
  out += dtype_name(desc.dtype);
  const std::string count = std::to_string(desc.count);
  switch (desc.kind) {
    case CollectiveKind::kAllReduce:
      out += ", count=" + count + ", " + std::string(reduce_op_name(desc.op));
      break;
    case CollectiveKind::kReduceScatter:
      out += ", recv_count=" + count + ", " + std::string(reduce_op_name(desc.op));
      break;
    case CollectiveKind::kAllGather: out += ", send_count=" + count; break;
    case CollectiveKind::kBroadcast:
      out += ", count=" + count + ", root=" + std::to_string(desc.root);
      break;
    case CollectiveKind::kReduce:
      out += ", count=" + count + ", " + std::string(reduce_op_name(desc.op)) +
             ", root=" + std::to_string(desc.root);
      break;
  }
  return out + "]";
}

std::string format_bytes(double bytes) {
  char buf[32];
  if (bytes >= 1 << 30) std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1 << 30));
  else if (bytes >= 1 << 20) std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1 << 20));
  else if (bytes >= 1 << 10) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

void record_collective_in_ledger(const CollectiveDesc& desc, int ranks) {
  OpLedger* ledger = active_op_ledger();
  if (ledger == nullptr) return;
  // One rank: recv = send, so nothing, or a copy (Note [One rank needs no NCCL]).
  if (ranks == 1) {
    if (desc.send != desc.recv && desc.bytes() > 0) {
      ledger->record("collective",
                     {ledger::elementwise("copy (one rank)", static_cast<int64_t>(desc.count),
                                          2 * static_cast<double>(desc.bytes()))});
    }
    return;
  }
  const std::string name(collective_name(desc.kind)), type(dtype_name(desc.dtype));
  char kernel[64], shape[64];
  std::snprintf(kernel, sizeof kernel, "nccl %s (%d rank%s)", name.c_str(), ranks,
                ranks == 1 ? "" : "s");
  std::snprintf(shape, sizeof shape, "[%zu] %s", desc.count, type.c_str());
  ledger->record("collective", {Launch{kernel, shape, LaunchRate::kMemory,
                                       2 * static_cast<double>(desc.bytes()), 0}});
}

}  // namespace ls
