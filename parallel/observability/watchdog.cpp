// Watchdog (see parallel/observability/watchdog.h).
#include "parallel/observability/watchdog.h"

#include <algorithm>
#include <cstdio>

namespace ls {
namespace {

using Clock = Watchdog::Clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

const CollectiveRecord* waiting_in(const ReplicaProgress& r) {
  for (const CollectiveRecord& rec : r.records) {
    if (rec.started && !rec.completed) return &rec;
  }
  return nullptr;
}

int64_t last_completed(const ReplicaProgress& r) {
  int64_t last = 0;
  for (const CollectiveRecord& rec : r.records) {
    if (rec.completed) last = rec.desc.seq;
  }
  return last;
}

}  // namespace

std::optional<std::string> Watchdog::check(const std::vector<ReplicaProgress>& replicas,
                                           Clock::time_point now) {
  bool stuck = false;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const CollectiveRecord* rec = waiting_in(replicas[i]);
    if (rec == nullptr) continue;
    auto [it, inserted] = started_at_.try_emplace({static_cast<int>(i), rec->desc.seq}, now);
    if (!inserted && now - it->second > timeout_) stuck = true;
  }
  // Forget collectives that have completed, so the map stays small.
  std::erase_if(started_at_, [&](const auto& entry) {
    const ReplicaProgress& r = replicas[static_cast<size_t>(entry.first.first)];
    const CollectiveRecord* rec = waiting_in(r);
    return rec == nullptr || rec->desc.seq != entry.first.second;
  });
  if (!stuck) return std::nullopt;
  char head[96];
  std::snprintf(head, sizeof head, "collective timeout (%.1f s): ", seconds(timeout_));
  return head + describe(replicas, now);
}

std::string Watchdog::describe(const std::vector<ReplicaProgress>& replicas,
                               Clock::time_point now) const {
  // The collective the laggards are measured against: the newest one anybody waits in.
  int64_t target = 0;
  for (const ReplicaProgress& r : replicas) {
    if (const CollectiveRecord* rec = waiting_in(r)) target = std::max(target, rec->desc.seq);
  }
  std::string out;
  for (size_t index = 0; index < replicas.size(); ++index) {
    const ReplicaProgress& r = replicas[index];
    if (!out.empty()) out += "; ";
    out += "replica " + std::to_string(r.rank) + " (" + r.device.str() + ") ";
    const CollectiveRecord* rec = waiting_in(r);
    if (rec != nullptr) {
      out += "waits in " + ls::describe(rec->desc);  // not the member describe()
      auto it = started_at_.find({static_cast<int>(index), rec->desc.seq});
      if (it != started_at_.end()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, " for %.1f s", seconds(now - it->second));
        out += buf;
      }
      if (!r.waiting_for.empty()) out += ", waiting for " + r.waiting_for;
      continue;
    }
    const int64_t issued = r.records.empty() ? 0 : r.records.back().desc.seq;
    if (target > 0 && issued < target) out += "never issued #" + std::to_string(target) + ": ";
    out += "its last completed collective is #" + std::to_string(last_completed(r)) +
           " and it is in " + phase_name(r.phase) + " of step " + std::to_string(r.step);
  }
  return out;
}

}  // namespace ls
