// AtomicFileWriter, fsync_dir, read_file_bytes and CRC-32 (see engine/model/checkpoint/atomic_file.h).
// Plain POSIX calls: open/write/fsync/rename, retried on EINTR, each failure an ls::Error.
#include "engine/model/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <lockstep/error.h>

namespace ls::checkpoint {
namespace {

namespace fs = std::filesystem;

std::atomic<uint64_t> g_temp_counter{0};

std::string parent_dir(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void write_all(int fd, std::span<const std::byte> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    const ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    LS_CHECK_IO(n > 0, "cannot write '", path, "': ", std::strerror(errno),
                " (disk full? check free space and permissions)");
    done += static_cast<size_t>(n);
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int open_for_reading(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  LS_CHECK_IO(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  return fd;
}

// Reads exactly bytes.size() bytes at `offset`; false if the file ends first.
bool read_exact(int fd, std::span<std::byte> bytes, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    const ssize_t n = ::pread(fd, bytes.data() + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    LS_CHECK_IO(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  const fs::path target(path_);
  LS_CHECK_IO(!target.filename().empty(), "cannot write '", path_, "': not a file name");
  // Built by appending: GCC 12 warns (-Wrestrict, a false positive) on "literal" + string&&.
  std::string base = ".";
  base += target.filename().string();
  base += ".tmp-";
  base += std::to_string(::getpid());
  base += '-';
  base += std::to_string(g_temp_counter.fetch_add(1));
  temp_path_ = (target.parent_path() / base).string();
  do {
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  LS_CHECK_IO(fd_ >= 0, "cannot create '", temp_path_, "': ", std::strerror(errno),
              " (does the directory exist and is it writable?)");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFileWriter::append(std::span<const std::byte> bytes) {
  LS_CHECK_IO(fd_ >= 0, "'", path_, "': append after commit()");
  write_all(fd_, bytes, temp_path_);
}

void AtomicFileWriter::commit() {
  LS_CHECK_IO(fd_ >= 0, "'", path_, "': commit() called twice");
  int rc;
  do {
    rc = ::fsync(fd_);
  } while (rc != 0 && errno == EINTR);
  LS_CHECK_IO(rc == 0, "cannot fsync '", temp_path_, "': ", std::strerror(errno));
  rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    LS_THROW_IO("cannot close '", temp_path_, "': ", std::strerror(err));
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    LS_THROW_IO("cannot rename '", temp_path_, "' to '", path_, "': ", std::strerror(err));
  }
  fsync_dir(parent_dir(path_));
}

void AtomicFileWriter::abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void write_file_atomic(const std::string& path, std::span<const std::byte> bytes) {
  AtomicFileWriter writer(path);
  writer.append(bytes);
  writer.commit();
}

void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void fsync_dir(const std::string& dir) {
  int fd;
  do {
    fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  LS_CHECK_IO(fd >= 0, "cannot open directory '", dir, "' to fsync it: ", std::strerror(errno));
  Fd guard(fd);
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  LS_CHECK_IO(rc == 0 || errno == EINVAL, "cannot fsync directory '", dir,
              "': ", std::strerror(errno));
}

std::vector<std::byte> read_file_bytes(const std::string& path, uint64_t max_bytes) {
  Fd fd(open_for_reading(path));
  struct stat st{};
  LS_CHECK_IO(::fstat(fd.get(), &st) == 0, "cannot stat '", path, "': ", std::strerror(errno));
  LS_CHECK_IO(S_ISREG(st.st_mode), "'", path, "' is not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  LS_CHECK_IO(size <= max_bytes, "'", path, "' is ", size, " bytes, more than the limit of ",
              max_bytes, " for this file");
  std::vector<std::byte> bytes(size);
  LS_CHECK_IO(read_exact(fd.get(), bytes, 0, path), "'", path, "' shrank while it was read");
  std::byte extra;
  LS_CHECK_IO(!read_exact(fd.get(), std::span(&extra, 1), size, path), "'", path,
              "' grew while it was read");
  return bytes;
}

uint32_t crc32_of(std::span<const std::byte> bytes, uint32_t crc) {
  uLong sum = crc;
  size_t done = 0;
  while (done < bytes.size()) {
    const size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 30);
    sum =
        ::crc32(sum, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(chunk));
    done += chunk;
  }
  return static_cast<uint32_t>(sum);
}

uint32_t crc32_of_file(const std::string& path) {
  Fd fd(open_for_reading(path));
  std::vector<std::byte> buffer(size_t{1} << 20);
  uint32_t crc = 0;
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    LS_CHECK_IO(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) return crc;
    crc = crc32_of(std::span(buffer.data(), static_cast<size_t>(n)), crc);
  }
}

}  // namespace ls::checkpoint
