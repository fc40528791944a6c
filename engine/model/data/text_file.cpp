// Whole-file reads with std::filesystem checks first, so a missing path, a directory and an
// unreadable file each get their own message.
#include "engine/model/data/text_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <lockstep/error.h>

namespace ls::data {

void check_readable_file(const std::string& path, std::string_view what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  LS_CHECK_IO(status.type() != fs::file_type::not_found, what, " '", path,
              "' not found; check the path (and that its package is installed)");
  LS_CHECK_IO(!ec, what, " '", path, "': cannot access: ", ec.message(),
              "; check the path and the permissions of its folders");
  LS_CHECK_IO(fs::is_regular_file(status), what, " '", path,
              "' is not a regular file; pass the path of the file, not a directory");
  std::ifstream in(path, std::ios::binary);
  LS_CHECK_IO(in.is_open(), what, " '", path, "': cannot open: ", std::strerror(errno),
              "; check its permissions");
}

std::string read_text_file(const std::string& path, std::string_view what) {
  check_readable_file(path, what);
  std::ifstream in(path, std::ios::binary);
  LS_CHECK_IO(in.is_open(), what, " '", path, "': cannot open: ", std::strerror(errno),
              "; check its permissions");
  std::ostringstream text;
  text << in.rdbuf();
  LS_CHECK_IO(!in.bad(), what, " '", path, "': read error; check the disk and the file");
  return std::move(text).str();
}

}  // namespace ls::data
