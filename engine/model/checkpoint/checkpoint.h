// Training checkpoints on disk: DIR/step-000040/{model,optimizer}.safetensors + meta.json, and
// DIR/latest naming the last committed step directory.
// Contract: commit_checkpoint is crash-safe (see Note [Checkpoint commit protocol] in the .cpp):
// a kill at any moment leaves the previous checkpoint loadable and `latest` naming a complete
// one. It checks the free disk space first, and prunes older checkpoints after the commit as
// CheckpointRetention says (Note [Checkpoint retention]). load_checkpoint verifies every file's
// size and CRC-32 against meta.json before parsing, and raises ls::Error naming the file and the
// problem. One committer per DIR at a time; loads may run concurrently with a commit.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <lockstep/checkpoint_retention.h>
#include "engine/model/checkpoint/safetensors.h"

namespace ls::checkpoint {

inline constexpr int64_t kCheckpointFormatVersion = 1;

struct CheckpointMeta {
  int64_t step = 0;           // >= 0; names the directory
  uint64_t seed = 0;          // the run's seed (written as a decimal string: exact in any reader)
  int64_t epoch = 0;          // data position: where the next batch comes from
  int64_t batch_index = 0;
  std::string model;          // free-form descriptions, e.g. "mlp 784-256-10"
  std::string optimizer;      // e.g. "adamw"
  int64_t optimizer_steps = 0;
  std::map<std::string, std::string> extra;

  bool operator==(const CheckpointMeta&) const = default;
};

struct LoadedCheckpoint {
  std::string path;  // the step directory that was loaded
  CheckpointMeta meta;
  SafetensorsFile model;
  SafetensorsFile optimizer;
};

// "step-000040" (at least six digits).
std::string checkpoint_step_name(int64_t step);

// Writes and commits DIR/step-NNNNNN (creating DIR if needed), points DIR/latest at it, then
// removes the older checkpoints `retention` does not keep; returns the committed directory.
// Committing a step that already exists replaces it. Refuses (ls::Error, kind io, nothing
// written) when the filesystem has less free space than the checkpoint needs.
std::string commit_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                              const std::vector<NamedHostTensor>& model,
                              const std::vector<NamedHostTensor>& optimizer,
                              const CheckpointRetention& retention = {});

// The disk space a commit of these tensors needs: their bytes plus headers and meta.json.
uint64_t checkpoint_bytes_needed(const std::vector<NamedHostTensor>& model,
                                 const std::vector<NamedHostTensor>& optimizer);

// Loads a step directory, or the one DIR/latest names when given a checkpoint directory.
LoadedCheckpoint load_checkpoint(const std::string& dir_or_step_dir);

// The step directory DIR/latest names, or nullopt when DIR has no `latest` (no checkpoint yet).
// A `latest` that is malformed or names a missing directory is an ls::Error, not nullopt:
// silently starting from scratch would lose the run.
std::optional<std::string> latest_checkpoint(const std::string& dir);

// ---- testing: simulated crashes --------------------------------------------------------------
enum class CrashPoint {
  kNone,
  kAfterModelFile,   // temp dir holds model.safetensors only
  kAfterTempDir,     // temp dir complete and fsynced, not yet renamed
  kAfterRename,      // step dir in place, `latest` still names the previous one
  kAfterLatestTemp,  // new `latest` written to its temp file, not yet renamed
  kDuringPrune,      // new checkpoint committed; the first pruned one renamed to its trash name
};

// Thrown by commit_checkpoint at the armed crash point; it leaves the disk exactly as a kill
// there would (temp files stay). Not an ls::Error, so nothing mistakes it for a real failure.
class SimulatedCrash : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Arms a crash point for the next commit_checkpoint in this process; it fires once.
void set_checkpoint_crash_point_for_testing(CrashPoint point);

// Makes commits see this many free bytes on the disk instead of asking statvfs (nullopt: ask).
void set_free_disk_bytes_for_testing(std::optional<uint64_t> bytes);

}  // namespace ls::checkpoint
