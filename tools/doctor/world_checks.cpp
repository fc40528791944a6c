// lockstep-doctor's checks across processes (see world_checks.h).
#include "tools/doctor/world_checks.h"

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/error.h>
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/runtime/world_communicators.h"
#include "tools/doctor/allreduce_check.h"

#ifndef LOCKSTEP_DOCTOR_VERSION
#define LOCKSTEP_DOCTOR_VERSION "unknown"  // tools/CMakeLists.txt passes project(VERSION)
#endif

namespace ls::doctor {
namespace {

using std::to_string;

// ---- length-prefixed fields: "5:hello3:abc" ----

void put(std::string& out, const std::string& field) {
  out += to_string(field.size()) + ":" + field;
}

std::vector<std::string> fields_of(const std::string& text, const char* what) {
  std::vector<std::string> fields;
  size_t at = 0;
  while (at < text.size()) {
    const size_t colon = text.find(':', at);
    LS_CHECK(colon != std::string::npos && colon > at, "lockstep-doctor: a malformed ", what,
             " message from another process (no length at byte ", at,
             "); do all processes run the same lockstep-doctor?");
    size_t length = 0;
    for (size_t i = at; i < colon; ++i) {
      LS_CHECK(text[i] >= '0' && text[i] <= '9', "lockstep-doctor: a malformed ", what,
               " message from another process (a bad length at byte ", i, ")");
      length = length * 10 + static_cast<size_t>(text[i] - '0');
    }
    LS_CHECK(colon + 1 + length <= text.size(), "lockstep-doctor: a truncated ", what,
             " message from another process");
    fields.push_back(text.substr(colon + 1, length));
    at = colon + 1 + length;
  }
  return fields;
}

int int_of(const std::string& field) {
  LS_CHECK(!field.empty() && field.size() < 10 &&
               field.find_first_not_of("0123456789") == std::string::npos,
           "lockstep-doctor: '", field, "' from another process is not a count");
  return std::stoi(field);
}

Verdict verdict_of(const std::string& name) {
  for (Verdict v : {Verdict::kOk, Verdict::kWarn, Verdict::kFail, Verdict::kNotApplicable}) {
    if (name == verdict_name(v)) return v;
  }
  LS_THROW("lockstep-doctor: unknown verdict '", name, "' from another process");
}

std::string build_of(const GpuReport& report) {
  std::string build;
  if (built_with_cuda()) {
    build = "CUDA runtime " + (report.runtime_version.empty() ? "?" : report.runtime_version) +
            ", NCCL " + (report.nccl_version.empty() ? "?" : report.nccl_version);
  } else {
    build = "host only (built without CUDA)";
  }
  return build + (mpi::built_with_mpi() ? ", MPI" : ", no MPI");
}

// One finding per process whose `field` differs from process 0's, or one OK finding.
Findings compare(const std::vector<ProcessFacts>& facts, const std::string& check,
                 const std::string& field_name, std::string ProcessFacts::*field, Verdict verdict,
                 const std::string& fix) {
  Findings findings;
  const ProcessFacts& first = facts.front();
  for (const ProcessFacts& p : facts) {
    if (p.*field == first.*field) continue;
    findings.push_back({check, p.name(), verdict,
                        field_name + " " + p.*field + "; " + first.name() + " has " + first.*field,
                        fix});
  }
  if (findings.empty()) {
    findings.push_back({check, to_string(facts.size()) + " processes", Verdict::kOk,
                        "the same " + field_name + " everywhere: " + first.*field, ""});
  }
  return findings;
}

Findings compare_devices(const std::vector<ProcessFacts>& facts) {
  Findings findings;
  const ProcessFacts& first = facts.front();
  for (const ProcessFacts& p : facts) {
    if (p.kind != first.kind) {
      findings.push_back(
          {"world-devices", p.name(), Verdict::kFail,
           p.kind + " devices (" + p.devices + "); " + first.name() + " drives " + first.kind +
               " devices (" + first.devices + ")",
           "every process must drive devices of one kind, all cuda or all host: give every "
           "process the same kind of --devices"});
    } else if (p.device_count != first.device_count) {
      findings.push_back(
          {"world-devices", p.name(), Verdict::kWarn,
           to_string(p.device_count) + " device(s) (" + p.devices + "); " + first.name() +
               " drives " + to_string(first.device_count) + " (" + first.devices + ")",
           "supported (replicas are numbered across processes), but usually a GPU missing on "
           "one machine: compare nvidia-smi there, or give every process the same --devices"});
    }
  }
  if (findings.empty()) {
    findings.push_back(
        {"world-devices", to_string(facts.size()) + " processes", Verdict::kOk,
         to_string(first.device_count) + " " + first.kind + " device(s) in every process", ""});
  }
  return findings;
}

// Two processes on one host driving one GPU (by PCI bus id, which CUDA_VISIBLE_DEVICES does not
// renumber): NCCL refuses two ranks on one GPU, and they would share its memory anyway.
Findings compare_gpus(const std::vector<ProcessFacts>& facts) {
  Findings findings;
  std::map<std::pair<std::string, std::string>, const ProcessFacts*> owner;  // (host, bus id)
  bool any = false;
  for (const ProcessFacts& p : facts) {
    for (const std::string& bus : p.gpu_bus_ids) {
      if (bus.empty()) continue;
      any = true;
      auto [it, fresh] = owner.try_emplace({p.host, bus}, &p);
      if (fresh) continue;
      findings.push_back(
          {"world-gpus",
           detail::concat("p", it->second->process, ",p", p.process, " (", p.host, ")"),
           Verdict::kFail,
           "both drive the GPU at " + bus + " (" + it->second->devices + " and " + p.devices + ")",
           "give each process on a machine its own GPUs, e.g. CUDA_VISIBLE_DEVICES="
           "$OMPI_COMM_WORLD_LOCAL_RANK in a wrapper script, or a different --devices per "
           "process; NCCL cannot put two ranks on one GPU"});
    }
  }
  if (any && findings.empty()) {
    findings.push_back({"world-gpus", to_string(facts.size()) + " processes", Verdict::kOk,
                        "no GPU is driven by two processes", ""});
  }
  return findings;
}

}  // namespace

std::string ProcessFacts::name() const { return detail::concat("p", process, " (", host, ")"); }

ProcessFacts facts_of_this_process(const World& world, const GpuReport& report) {
  ProcessFacts facts;
  facts.process = world.rank();
  facts.host = world.host_name();
  facts.version = LOCKSTEP_DOCTOR_VERSION;
  facts.build = build_of(report);
  const std::vector<Device>& devices = world.local_devices();
  facts.kind = devices.front().is_cuda() ? "cuda" : "host";
  facts.devices = devices_str(devices);
  facts.device_count = static_cast<int>(devices.size());
  facts.first_replica = world.first_replica(world.rank());
  for (const Device& d : devices) {
    if (d.is_cuda()) facts.gpu_bus_ids.push_back(pci_bus_id_of(report, d.index));
  }
  return facts;
}

Findings check_world_facts(const std::vector<ProcessFacts>& facts) {
  LS_CHECK(!facts.empty(), "check_world_facts: no processes");
  Findings findings =
      compare(facts, "world-version", "lockstep", &ProcessFacts::version, Verdict::kFail,
              "install the same lockstep build on every machine: the processes must agree on the "
              "collectives' order and wire format");
  for (Finding& f : compare(facts, "world-build", "build", &ProcessFacts::build, Verdict::kFail,
                            "build lockstep once against one CUDA toolkit, NCCL and MPI and run "
                            "that build everywhere; NCCL ranks of different versions cannot "
                            "join one communicator")) {
    findings.push_back(std::move(f));
  }
  for (Finding& f : compare_devices(facts)) findings.push_back(std::move(f));
  for (Finding& f : compare_gpus(facts)) findings.push_back(std::move(f));
  return findings;
}

Finding known_answer_world_all_reduce(const World& world, std::chrono::milliseconds timeout,
                                      bool* hung) {
  CommunicatorOptions options;
  options.timeout = timeout;
  KnownAnswerRun run;
  const World* w = &world;  // World lives until the process ends (World::finalize in main)
  run.make = [w, options] { return make_world_communicators(*w, options); };
  // Process 0's NCCL id broadcast and NCCL's initialisation are each bounded by the timeout.
  run.make_limit = 2 * timeout + std::chrono::seconds(5);
  run.check = "world-all-reduce";
  run.subject = devices_str(world.local_devices());
  const int first = world.first_replica(world.rank());
  run.scope = " in " + to_string(world.size()) + " processes, replicas " + to_string(first) + ".." +
              to_string(first + static_cast<int>(world.local_devices().size()) - 1) + " here";
  return known_answer_all_reduce(world.local_devices(), run, timeout, hung);
}

std::chrono::milliseconds local_checks_limit(int gpus, std::chrono::milliseconds timeout) {
  using std::chrono::seconds;
  const int pairs = gpus * (gpus - 1) / 2;
  // Per pair: a timed copy (timeout) and two child all-reduces (timeout + 30 s each); then the
  // all-reduce over every device (creation and collective, timeout + 5 s each).
  const auto per_pair = 3 * timeout + seconds(60);
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      pairs * per_pair + 2 * (timeout + seconds(5)) + seconds(60));
}

std::vector<std::string> exchange_strings(const World& world, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          const std::string& what) {
  if (world.size() == 1) return {mine};
  return mpi::allgather_string(mine, timeout, what.c_str());
}

std::string encode_facts(const ProcessFacts& facts) {
  std::string out;
  for (const std::string& field :
       {to_string(facts.process), facts.host, facts.version, facts.build, facts.kind, facts.devices,
        to_string(facts.device_count), to_string(facts.first_replica)}) {
    put(out, field);
  }
  for (const std::string& bus : facts.gpu_bus_ids) put(out, bus);
  return out;
}

ProcessFacts decode_facts(const std::string& text) {
  const std::vector<std::string> fields = fields_of(text, "process facts");
  LS_CHECK(fields.size() >= 8, "lockstep-doctor: a process sent ", fields.size(),
           " facts, expected at least 8; do all processes run the same lockstep-doctor?");
  ProcessFacts facts;
  facts.process = int_of(fields[0]);
  facts.host = fields[1];
  facts.version = fields[2];
  facts.build = fields[3];
  facts.kind = fields[4];
  facts.devices = fields[5];
  facts.device_count = int_of(fields[6]);
  facts.first_replica = int_of(fields[7]);
  facts.gpu_bus_ids.assign(fields.begin() + 8, fields.end());
  return facts;
}

std::string encode_findings(const Findings& findings) {
  std::string out;
  for (const Finding& f : findings) {
    for (const std::string& field :
         {f.check, f.subject, std::string(verdict_name(f.verdict)), f.detail, f.fix}) {
      put(out, field);
    }
  }
  return out;
}

Findings decode_findings(const std::string& text) {
  const std::vector<std::string> fields = fields_of(text, "findings");
  LS_CHECK(fields.size() % 5 == 0, "lockstep-doctor: a process sent ", fields.size(),
           " finding fields, not a multiple of 5");
  Findings findings;
  for (size_t i = 0; i < fields.size(); i += 5) {
    findings.push_back(
        {fields[i], fields[i + 1], verdict_of(fields[i + 2]), fields[i + 3], fields[i + 4]});
  }
  return findings;
}

}  // namespace ls::doctor
