// The flight recorder on disk: parallel/observability/flight_dump.h says what and why.
#include "parallel/observability/flight_dump.h"

#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <system_error>

#include <lockstep/error.h>
#include <lockstep/json.h>

namespace ls {
namespace {

const char* state_of(const CollectiveRecord& r) {
  if (r.refused) return "refused";
  if (r.completed) return "completed";
  return r.started ? "started" : "enqueued";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void write_collective(JsonWriter& json, const CollectiveRecord& r,
                      std::chrono::steady_clock::time_point now) {
  const CollectiveDesc& d = r.desc;
  const double age_ms = std::chrono::duration<double, std::milli>(now - r.enqueued).count();
  json.begin_object()
      .field("seq", d.seq)
      .field("op", collective_name(d.kind))
      .field("label", d.label)
      .field("dtype", dtype_name(d.dtype))
      .field("count", static_cast<int64_t>(d.count))
      .field("reduce", reduce_op_name(d.op))
      .field("root", d.root)
      .field("bytes", static_cast<int64_t>(d.bytes()))
      .field("state", state_of(r))
      .field("age_ms", age_ms)
      .field("in_graph", r.in_graph)
      .end_object();
}

}  // namespace

std::string write_flight_record(const std::string& dir, const FlightRecord& record) {
  namespace fs = std::filesystem;
  const fs::path folder = dir.empty() ? fs::temp_directory_path() : fs::path(dir);
  std::error_code error;
  fs::create_directories(folder, error);
  LS_CHECK_AS(ErrorKind::kIo, !error, "cannot create the flight recorder's directory ",
              folder.string(), ": ", error.message());
  // A process may fail more than once (tests do): each file gets the next number.
  static std::atomic<int> files_written{0};
  const fs::path path = folder / ("lockstep-flight-" + std::to_string(::getpid()) + "-" +
                                  std::to_string(++files_written) + "-p" +
                                  std::to_string(record.process) + ".json");
  JsonWriter json;
  json.begin_object()
      .field("format", "lockstep-flight/1")
      .field("reason", record.reason)
      .field("time", utc_now())
      .field("process", record.process)
      .field("processes", record.processes)
      .field("report", record.report);
  json.key("replicas").begin_array();
  for (const ReplicaProgress& r : record.replicas) {
    json.begin_object()
        .field("replica", r.rank)
        .field("device", r.device.str())
        .field("phase", phase_name(r.phase))
        .field("step", r.step)
        .field("waiting_for", r.waiting_for);
    json.key("collectives").begin_array();
    for (const CollectiveRecord& c : r.records) write_collective(json, c, record.now);
    json.end_array().end_object();
  }
  json.end_array();
  if (!record.stages.empty()) {
    json.key("stages").begin_array();
    for (const StageProgress& s : record.stages) {
      json.begin_object()
          .field("stage", s.stage)
          .field("pipeline", s.pipeline)
          .field("device", s.device.str())
          .field("step", s.step)
          .field("host", s.host)
          .field("actions_done", s.actions_done)
          .field("actions_enqueued", s.actions_enqueued)
          .field("actions", s.actions)
          .field("next_action", s.next_action)
          .field("input_ready", s.input_ready)
          .end_object();
    }
    json.end_array();
  }
  json.end_object();
  json.write_file(path.string());
  return path.string();
}

std::string flight_record_note(const std::string& dir, const FlightRecord& record) {
  try {
    const std::string path = write_flight_record(dir, record);
    const char* what = record.stages.empty() ? "the last collectives of every replica are in "
                                             : "where every stage stood is in ";
    return std::string("; ") + what + path + " (lockstep-doctor --flight " + path + ")";
  } catch (const Error& e) {
    return "; the flight recorder could not be written: " + e.message();
  }
}

}  // namespace ls
