// Durable, all-or-nothing file writes and the checksums checkpoints carry.
//
// Contract: write_file_atomic (and AtomicFileWriter::commit) make `path` hold exactly the new
// bytes or leave it untouched: the bytes go to a temporary file in the same directory, which is
// fsynced, renamed over `path`, and then the directory is fsynced, so the new name survives a
// power cut. A writer that is destroyed without commit() removes its temporary file. Every
// failure raises ls::Error naming the path and the OS error. Thread-safety: distinct paths only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ls::checkpoint {

class AtomicFileWriter {
 public:
  // Creates the temporary file `DIR/.NAME.tmp-PID-N` next to `path`.
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void append(std::span<const std::byte> bytes);
  // fsync, close, rename over the target, fsync the directory.
  void commit();
  // Closes the temporary file and leaves it on disk, as a killed process would (tests only).
  void abandon();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
};

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes);
void write_file_atomic(const std::string& path, std::string_view text);

// fsyncs a directory, making renames and creations inside it durable. Filesystems that cannot
// fsync a directory (EINVAL) are accepted silently.
void fsync_dir(const std::string& dir);

// Reads a whole regular file; refuses (ls::Error) files larger than max_bytes before allocating.
std::vector<std::byte> read_file_bytes(const std::string& path, uint64_t max_bytes);

// CRC-32 as zlib's crc32() computes it (the gzip/PNG polynomial); `crc` continues a running sum.
uint32_t crc32_of(std::span<const std::byte> bytes, uint32_t crc = 0);
uint32_t crc32_of_file(const std::string& path);

}  // namespace ls::checkpoint
