// commit_checkpoint, load_checkpoint, latest_checkpoint (see engine/model/checkpoint/checkpoint.h).
#include "engine/model/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include <lockstep/error.h>
#include <lockstep/json.h>
#include "engine/core/json_reader.h"
#include "engine/model/checkpoint/atomic_file.h"

namespace ls::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFormat = "lockstep-checkpoint";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kLatestFile = "latest";
constexpr uint64_t kMaxMetaBytes = uint64_t{16} << 20;
constexpr uint64_t kMaxLatestBytes = 4096;

std::atomic<CrashPoint> g_crash_point{CrashPoint::kNone};
std::mutex g_free_bytes_mutex;
std::optional<uint64_t> g_free_bytes_for_testing;  // guarded by g_free_bytes_mutex

void maybe_crash(CrashPoint here, const char* what) {
  CrashPoint armed = here;
  if (g_crash_point.compare_exchange_strong(armed, CrashPoint::kNone)) {
    throw SimulatedCrash(std::string("simulated crash ") + what);
  }
}

struct FileRecord {
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

struct MetaFile {
  CheckpointMeta meta;
  FileRecord model, optimizer;
};

std::string join(const std::string& dir, std::string_view name) {
  return (fs::path(dir) / name).string();
}

// "step-" followed by digits only: what `latest` may name (never a path).
bool is_step_name(std::string_view name) {
  if (name.size() <= 5 || name.substr(0, 5) != "step-" || name.size() > 5 + 19) return false;
  return name.find_first_not_of("0123456789", 5) == std::string_view::npos;
}

// ---- meta.json ------------------------------------------------------------------------------

std::string meta_json(const CheckpointMeta& m, const FileRecord& model, const FileRecord& opt) {
  JsonWriter w;
  w.begin_object();
  w.field("format", kFormat).field("format_version", kCheckpointFormatVersion);
  w.field("step", m.step).field("seed", std::to_string(m.seed));
  w.field("epoch", m.epoch).field("batch_index", m.batch_index);
  w.field("model", m.model).field("optimizer", m.optimizer);
  w.field("optimizer_steps", m.optimizer_steps);
  w.key("extra").begin_object();
  for (const auto& [k, v] : m.extra) w.field(k, v);
  w.end_object();
  w.key("files").begin_object();
  for (const auto& [name, rec] : {std::pair{kModelFile, model}, std::pair{kOptimizerFile, opt}}) {
    w.key(name).begin_object();
    w.field("bytes", static_cast<int64_t>(rec.bytes))
        .field("crc32", static_cast<int64_t>(rec.crc32));
    w.end_object();
  }
  w.end_object();
  w.end_object();
  return w.str() + "\n";
}

// Strict reader of one meta.json: every field required, no unknown ones, right types.
class MetaReader {
 public:
  explicit MetaReader(std::string source) : source_(std::move(source)) {}

  MetaFile parse(std::string_view text) {
    JsonLimits limits;
    limits.max_bytes = kMaxMetaBytes;
    const JsonValue root = parse_json(text, source_, limits);
    LS_CHECK_IO(root.is_object(), source_, ": expected a JSON object, got ",
                json_kind_name(root.kind()));
    // Format and version first: a newer file must say so, not fail on a field it added.
    LS_CHECK_IO(string_field(root, "format") == kFormat, source_,
                ": not a lockstep checkpoint (format '", string_field(root, "format"),
                "', expected '", kFormat, "')");
    const int64_t version = int_field(root, "format_version");
    LS_CHECK_IO(version == kCheckpointFormatVersion, source_, ": unknown format version ", version,
                " (this build reads version ", kCheckpointFormatVersion,
                "); load it with the lockstep that wrote it");
    only_fields(root, {"format", "format_version", "step", "seed", "epoch", "batch_index", "model",
                       "optimizer", "optimizer_steps", "extra", "files"});
    MetaFile out;
    CheckpointMeta& m = out.meta;
    m.step = int_field(root, "step");
    LS_CHECK_IO(m.step >= 0, source_, ": step ", m.step, " is negative");
    m.seed = seed_field(root);
    m.epoch = int_field(root, "epoch");
    m.batch_index = int_field(root, "batch_index");
    m.model = string_field(root, "model");
    m.optimizer = string_field(root, "optimizer");
    m.optimizer_steps = int_field(root, "optimizer_steps");
    for (const auto& [key, value] : field(root, "extra", JsonValue::Kind::kObject).members()) {
      LS_CHECK_IO(value.is_string(), source_, ": byte ", value.offset(), ": extra '", key,
                  "' must be a string, got ", json_kind_name(value.kind()));
      m.extra.emplace(key, value.as_string());
    }
    const JsonValue& files = field(root, "files", JsonValue::Kind::kObject);
    only_fields(files, {kModelFile, kOptimizerFile});
    out.model = file_record(files, kModelFile);
    out.optimizer = file_record(files, kOptimizerFile);
    return out;
  }

 private:
  const JsonValue& field(const JsonValue& obj, std::string_view key, JsonValue::Kind kind) {
    const JsonValue* v = obj.find(key);
    LS_CHECK_IO(v != nullptr, source_, ": byte ", obj.offset(), ": missing field '", key, "'");
    LS_CHECK_IO(v->kind() == kind, source_, ": byte ", v->offset(), ": field '", key, "' must be ",
                json_kind_name(kind), ", got ", json_kind_name(v->kind()));
    return *v;
  }

  const std::string& string_field(const JsonValue& obj, std::string_view key) {
    return field(obj, key, JsonValue::Kind::kString).as_string();
  }

  int64_t int_field(const JsonValue& obj, std::string_view key) {
    const JsonValue& v = field(obj, key, JsonValue::Kind::kNumber);
    try {
      return v.as_int64();
    } catch (const Error& e) {
      LS_THROW_IO(source_, ": field '", key, "': ", e.message());
    }
  }

  uint64_t seed_field(const JsonValue& obj) {
    const std::string& text = string_field(obj, "seed");
    uint64_t seed = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
    LS_CHECK_IO(!text.empty() && ec == std::errc() && ptr == text.data() + text.size(), source_,
                ": field 'seed' must be a decimal 64-bit unsigned integer in a string, got '", text,
                "'");
    return seed;
  }

  void only_fields(const JsonValue& obj, std::initializer_list<std::string_view> allowed) {
    for (const auto& [key, value] : obj.members()) {
      bool known = false;
      for (std::string_view a : allowed) known = known || key == a;
      LS_CHECK_IO(known, source_, ": byte ", value.offset(), ": unknown field '", key, "'");
    }
  }

  FileRecord file_record(const JsonValue& files, std::string_view name) {
    const JsonValue& rec = field(files, name, JsonValue::Kind::kObject);
    only_fields(rec, {"bytes", "crc32"});
    const int64_t bytes = int_field(rec, "bytes");
    const int64_t crc = int_field(rec, "crc32");
    LS_CHECK_IO(bytes >= 0 && crc >= 0 && crc <= 0xffffffffll, source_, ": files.", name,
                ": bytes ", bytes, " or crc32 ", crc, " out of range");
    return {static_cast<uint64_t>(bytes), static_cast<uint32_t>(crc)};
  }

  std::string source_;
};

// ---- commit ---------------------------------------------------------------------------------

// Removes temporaries left by commits that died: `.tmp-step-N-PID` and `.trash-step-N-PID`
// directories and `.latest.tmp-PID-K` files whose PID is this process (one committer per DIR)
// or no process.
void remove_stale_temps(const std::string& dir) {
  auto owner_gone = [](std::string_view digits) {
    pid_t pid = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || pid <= 0) return false;
    return pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH);
  };
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::string_view pid;
    if (name.starts_with(".tmp-step-") || name.starts_with(".trash-step-")) {
      pid = std::string_view(name).substr(name.rfind('-') + 1);
    } else if (name.starts_with(".latest.tmp-")) {
      const std::string_view rest = std::string_view(name).substr(12);
      pid = rest.substr(0, rest.find('-'));
    } else {
      continue;
    }
    if (owner_gone(pid)) fs::remove_all(entry.path(), ec);  // best effort
  }
}

std::optional<std::string> latest_name_or_none(const std::string& dir) {
  try {
    const auto path = latest_checkpoint(dir);
    if (path) return fs::path(*path).filename().string();
  } catch (const Error&) {
  }
  return std::nullopt;
}

// Removes DIR/NAME (a step directory) so that no crash leaves half of it under its step name:
// one atomic rename to `.trash-NAME-PID`, a directory fsync, then the deletion (Note [Checkpoint
// retention]). Raises ls::Error (kind io) when the rename fails; a failed deletion leaves trash
// that the next commit's remove_stale_temps removes.
void move_to_trash_and_delete(const std::string& dir, const std::string& name,
                              CrashPoint crash_after_rename = CrashPoint::kNone) {
  const std::string trash = join(dir, ".trash-" + name + "-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(trash, ec);
  LS_CHECK_IO(::rename(join(dir, name).c_str(), trash.c_str()) == 0, "cannot remove '",
              join(dir, name), "': rename to '", trash, "' failed: ", std::strerror(errno));
  fsync_dir(dir);
  if (crash_after_rename != CrashPoint::kNone) {
    maybe_crash(crash_after_rename, "while pruning old checkpoints");
  }
  fs::remove_all(trash, ec);
}

// Moves the finished temp directory to DIR/NAME. Note [Checkpoint commit protocol], step 3.
void install(const std::string& dir, const std::string& temp, const std::string& name) {
  const std::string target = join(dir, name);
  std::error_code ec;
  if (fs::exists(target, ec)) {
    if (latest_name_or_none(dir) == name) {
      // `latest` names it: swap atomically, so a crash never leaves `latest` dangling.
      LS_CHECK_IO(
          ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0,
          "cannot replace checkpoint '", target, "', which ", join(dir, kLatestFile),
          " names: renameat2(RENAME_EXCHANGE) failed: ", std::strerror(errno),
          "; commit a different step or remove it first");
      fsync_dir(dir);
      fs::remove_all(temp, ec);  // now the old checkpoint
      return;
    }
    // Not the current checkpoint: left by a crash after its rename, or by an earlier run.
    move_to_trash_and_delete(dir, name);
  }
  LS_CHECK_IO(::rename(temp.c_str(), target.c_str()) == 0, "cannot rename '", temp, "' to '",
              target, "': ", std::strerror(errno));
}

FileRecord record_of(const std::string& path) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  LS_CHECK_IO(!ec, "cannot read the size of '", path, "': ", ec.message());
  return {bytes, crc32_of_file(path)};
}

// Steps 1-2 of Note [Checkpoint commit protocol]: the complete, fsynced temp directory.
void write_temp_dir(const std::string& temp, const CheckpointMeta& meta,
                    const std::vector<NamedHostTensor>& model,
                    const std::vector<NamedHostTensor>& optimizer) {
  const SafetensorsMetadata st_meta = {{"format", "pt"}};
  write_safetensors(join(temp, kModelFile), model, st_meta);
  maybe_crash(CrashPoint::kAfterModelFile, "after writing model.safetensors");
  write_safetensors(join(temp, kOptimizerFile), optimizer, st_meta);
  const std::string meta_text =
      meta_json(meta, record_of(join(temp, kModelFile)), record_of(join(temp, kOptimizerFile)));
  try {
    MetaReader(kMetaFile).parse(meta_text);
  } catch (const Error& e) {
    LS_THROW_IO("cannot commit checkpoint: its meta.json would not load back (", e.message(),
                "); fix the CheckpointMeta strings");
  }
  write_file_atomic(join(temp, kMetaFile), meta_text);
  fsync_dir(temp);
}

// ---- disk space -----------------------------------------------------------------------------

uint64_t free_disk_bytes(const std::string& dir) {
  {
    std::lock_guard lock(g_free_bytes_mutex);
    if (g_free_bytes_for_testing) return *g_free_bytes_for_testing;
  }
  struct statvfs fs_stat {};
  LS_CHECK_IO(::statvfs(dir.c_str(), &fs_stat) == 0, "cannot read the free space of '", dir,
              "': ", std::strerror(errno));
  return static_cast<uint64_t>(fs_stat.f_bavail) * static_cast<uint64_t>(fs_stat.f_frsize);
}

// Fails before anything is written when the new checkpoint cannot fit: a half-written one would
// only fail later, after filling the disk that the rest of the machine shares.
void check_free_space(const std::string& dir, uint64_t needed) {
  const uint64_t free = free_disk_bytes(dir);
  LS_CHECK_IO(needed <= free, "not enough disk space to write a checkpoint in '", dir,
              "': it needs about ", needed, " bytes (", needed >> 20,
              " MiB) and the filesystem has ", free, " bytes (", free >> 20,
              " MiB) free, after removing the old checkpoints retention allows. Free some space ",
              "(old step directories may go, but not the one DIR/latest names), or checkpoint to "
              "another disk; the previous checkpoint is intact");
}

// ---- retention ------------------------------------------------------------------------------

// Note [Checkpoint retention]
// Pruning runs after `latest` names the new checkpoint, so there is always one complete
// checkpoint to resume from. Candidates are the step directories with a step below the new one
// (never the new one, and never a higher step: that is another timeline's work, replaced when
// this run commits that step). Of those, the newest keep_last - 1 stay, and any step that is a
// multiple of keep_every. The rest go oldest first, each renamed to `.trash-step-N-PID` (one
// atomic rename) before it is deleted: a crash in the middle leaves either a complete step
// directory or a trash directory, never a half-deleted checkpoint under a step name. The next
// commit deletes leftover trash (remove_stale_temps). Pruning is housekeeping: a failure is a
// warning on stderr, never a failed commit (the new checkpoint is good; the old one stays).
// The disk holds keep_last + 1 checkpoints while a commit runs. When the free-space check finds
// too little room, the checkpoints this commit would prune anyway go first (all but the one
// `latest` names), so a full disk of old checkpoints does not stop a run with retention on.
std::vector<std::pair<int64_t, std::string>> checkpoints_to_prune(
    const std::string& dir, int64_t committed_step, const CheckpointRetention& retention) {
  std::vector<std::pair<int64_t, std::string>> older;  // (step, name)
  if (retention.keep_last <= 0) return older;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (!is_step_name(name) || !it->is_directory(type_ec)) continue;
    int64_t step = 0;
    const auto [end, parse] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
    if (parse != std::errc() || end != name.data() + name.size()) continue;  // out of range
    if (step < committed_step) older.emplace_back(step, name);
  }
  LS_CHECK_IO(!ec, "cannot list checkpoint directory '", dir, "': ", ec.message());
  std::sort(older.begin(), older.end(), std::greater<>());  // newest first
  const size_t kept_newest = std::min(older.size(), static_cast<size_t>(retention.keep_last - 1));
  older.erase(older.begin(), older.begin() + static_cast<std::ptrdiff_t>(kept_newest));
  std::erase_if(older, [&](const auto& c) {
    return retention.keep_every > 0 && c.first % retention.keep_every == 0;
  });
  std::reverse(older.begin(), older.end());  // oldest first
  return older;
}

// Prunes what retention does not keep, except `spare` (the checkpoint `latest` names, when
// pruning before a commit); a failure is reported on stderr and stops the pruning.
void prune_checkpoints(const std::string& dir, int64_t committed_step,
                       const CheckpointRetention& retention, const std::string& spare = "") {
  try {
    bool first = true;
    for (const auto& [step, name] : checkpoints_to_prune(dir, committed_step, retention)) {
      if (name == spare) continue;
      move_to_trash_and_delete(dir, name, first ? CrashPoint::kDuringPrune : CrashPoint::kNone);
      first = false;
    }
  } catch (const Error& e) {
    std::fprintf(stderr,
                 "lockstep: warning: checkpoint retention in '%s' stopped: %s (the checkpoints are "
                 "intact; older ones are kept until a later save can remove them)\n",
                 dir.c_str(), e.message().c_str());
  }
}

// The free-space check of Note [Checkpoint retention], pruning early when that makes room.
void make_room(const std::string& dir, int64_t step, uint64_t needed,
               const CheckpointRetention& retention) {
  if (needed <= free_disk_bytes(dir)) return;
  prune_checkpoints(dir, step, retention, latest_name_or_none(dir).value_or(""));
  check_free_space(dir, needed);
}

std::string resolve_step_dir(const std::string& path) {
  std::error_code ec;
  if (fs::exists(join(path, kMetaFile), ec)) return path;
  if (fs::exists(join(path, kLatestFile), ec)) return *latest_checkpoint(path);
  LS_THROW_IO("no checkpoint at '", path, "': it holds neither meta.json (a step directory) nor ",
              "latest (a checkpoint directory)");
}

SafetensorsFile load_verified(const std::string& path, const FileRecord& rec,
                              const std::string& meta) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  LS_CHECK_IO(status.type() != fs::file_type::not_found, path, ": missing (", meta,
              " lists it): the checkpoint is incomplete");
  LS_CHECK_IO(fs::is_regular_file(status), path, ": not a regular file");
  const uint64_t size = fs::file_size(path, ec);
  LS_CHECK_IO(!ec, path, ": cannot read its size: ", ec.message());
  LS_CHECK_IO(size == rec.bytes, path, ": size mismatch: ", meta, " says ", rec.bytes,
              " bytes, the file has ", size, " (truncated or replaced)");
  std::vector<std::byte> bytes = read_file_bytes(path, rec.bytes);
  const uint32_t crc = crc32_of(bytes);
  if (crc != rec.crc32) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "crc32 %08x, the file has %08x", rec.crc32, crc);
    LS_THROW_IO(path, ": checksum mismatch: ", meta, " says ", buf, " (the file is corrupt)");
  }
  return read_safetensors_from_memory(std::move(bytes), path);
}

}  // namespace

std::string checkpoint_step_name(int64_t step) {
  LS_CHECK_IO(step >= 0, "checkpoint step ", step, " is negative");
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return buf;
}

void set_checkpoint_crash_point_for_testing(CrashPoint point) { g_crash_point.store(point); }

void set_free_disk_bytes_for_testing(std::optional<uint64_t> bytes) {
  std::lock_guard lock(g_free_bytes_mutex);
  g_free_bytes_for_testing = bytes;
}

uint64_t checkpoint_bytes_needed(const std::vector<NamedHostTensor>& model,
                                 const std::vector<NamedHostTensor>& optimizer) {
  // Headers are JSON: per tensor its name, dtype, shape and offsets. Each file may also round up
  // to a filesystem block; meta.json and `latest` are small.
  constexpr uint64_t kPerTensorHeader = 96, kPerFileSlack = 8192, kMetaAndLatest = 16384;
  uint64_t bytes = 2 * kPerFileSlack + kMetaAndLatest;
  for (const auto* tensors : {&model, &optimizer}) {
    for (const NamedHostTensor& t : *tensors) {
      bytes += t.data.size() + t.name.size() + kPerTensorHeader + 24 * t.shape.size();
    }
  }
  return bytes;
}

// Note [Checkpoint commit protocol]
// 1. Write model.safetensors, optimizer.safetensors and meta.json (sizes + CRC-32s) into
//    DIR/.tmp-step-N-PID, each file fsynced; then fsync that directory.
// 2. Self-check: meta.json parses back with the strict reader (so no commit is unloadable).
// 3. Rename it to DIR/step-N and fsync DIR. If step-N exists and `latest` names it, the two are
//    swapped with RENAME_EXCHANGE (atomic) and the old one deleted; any other existing step-N is
//    an orphan (from a crash after step 3 of an earlier commit) and is deleted first.
// 4. Write DIR/latest via a temp file + fsync + rename + fsync DIR.
// Until step 4's rename, `latest` names the previous (complete) checkpoint; after it, the new
// one, which steps 1-3 made durable first. Leftover temps are removed by the next commit.
// Before step 1 the free space is checked; after step 4 old checkpoints are pruned (Note
// [Checkpoint retention]).
std::string commit_checkpoint(const std::string& dir, const CheckpointMeta& meta,
                              const std::vector<NamedHostTensor>& model,
                              const std::vector<NamedHostTensor>& optimizer,
                              const CheckpointRetention& retention) {
  LS_CHECK(retention.keep_last >= 0 && retention.keep_every >= 0,
           "checkpoint retention: keep_last (", retention.keep_last, ") and keep_every (",
           retention.keep_every, ") must be >= 0");
  const std::string name = checkpoint_step_name(meta.step);
  std::error_code ec;
  const bool created = fs::create_directories(dir, ec);
  LS_CHECK_IO(!ec, "cannot create checkpoint directory '", dir, "': ", ec.message());
  if (created) {  // make DIR's own entry durable
    fs::path abs = fs::absolute(dir);
    if (!abs.has_filename()) abs = abs.parent_path();  // "DIR/"
    fsync_dir(abs.parent_path().string());
  }
  remove_stale_temps(dir);
  make_room(dir, meta.step, checkpoint_bytes_needed(model, optimizer), retention);
  const std::string temp = join(dir, ".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(temp, ec);
  fs::create_directory(temp, ec);
  LS_CHECK_IO(!ec, "cannot create '", temp, "': ", ec.message());

  try {
    write_temp_dir(temp, meta, model, optimizer);
  } catch (const Error&) {
    fs::remove_all(temp,
                   ec);  // a real failure cleans up; a SimulatedCrash leaves it, as a kill would
    throw;
  }
  maybe_crash(CrashPoint::kAfterTempDir, "after the temp directory was complete");

  install(dir, temp, name);
  fsync_dir(dir);
  maybe_crash(CrashPoint::kAfterRename, "after the rename, before latest");

  AtomicFileWriter latest(join(dir, kLatestFile));
  latest.append(std::as_bytes(std::span<const char>(name.data(), name.size())));
  latest.append(std::as_bytes(std::span<const char>("\n", 1)));
  if (g_crash_point.load() == CrashPoint::kAfterLatestTemp) latest.abandon();  // as a kill would
  maybe_crash(CrashPoint::kAfterLatestTemp, "after writing latest's temp file");
  latest.commit();
  prune_checkpoints(dir, meta.step, retention);
  return join(dir, name);
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  const std::string path = join(dir, kLatestFile);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  const std::vector<std::byte> bytes = read_file_bytes(path, kMaxLatestBytes);
  std::string_view name(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (name.ends_with('\n')) name.remove_suffix(1);
  LS_CHECK_IO(is_step_name(name), path, ": expected a checkpoint name like step-000040, got '",
              std::string(name.substr(0, 64)), "' (corrupt file?)");
  const std::string step_dir = join(dir, name);
  LS_CHECK_IO(fs::is_directory(step_dir, ec), path, " names '", name,
              "', which does not exist: the checkpoint was deleted or moved");
  return step_dir;
}

namespace {

LoadedCheckpoint load_step_dir(const std::string& step_dir) {
  LoadedCheckpoint out;
  out.path = step_dir;
  const std::string meta_path = join(out.path, kMetaFile);
  const std::vector<std::byte> text = read_file_bytes(meta_path, kMaxMetaBytes);
  MetaFile parsed = MetaReader(meta_path).parse(
      std::string_view(reinterpret_cast<const char*>(text.data()), text.size()));
  const std::string dir_name = fs::path(out.path).filename().string();
  if (is_step_name(dir_name)) {
    LS_CHECK_IO(dir_name == checkpoint_step_name(parsed.meta.step), meta_path, ": step ",
                parsed.meta.step, " does not match its directory name '", dir_name, "'");
  }
  out.meta = std::move(parsed.meta);
  out.model = load_verified(join(out.path, kModelFile), parsed.model, meta_path);
  out.optimizer = load_verified(join(out.path, kOptimizerFile), parsed.optimizer, meta_path);
  return out;
}

}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& dir_or_step_dir) {
  const std::string step_dir = resolve_step_dir(dir_or_step_dir);
  try {
    return load_step_dir(step_dir);
  } catch (const Error&) {
    // A commit running alongside may have pruned the checkpoint `latest` named a moment ago
    // (Note [Checkpoint retention]): when that directory is gone, follow `latest` once more.
    std::error_code ec;
    if (step_dir == dir_or_step_dir || fs::exists(step_dir, ec)) throw;
    const std::string now = resolve_step_dir(dir_or_step_dir);
    if (now == step_dir) throw;
    return load_step_dir(now);
  }
}

}  // namespace ls::checkpoint
