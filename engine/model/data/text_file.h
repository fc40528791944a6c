// Reading whole text files for the text-data loaders, with the IDX reader's kind of errors.
//
// Contract: read_text_file returns the file's bytes, or throws ls::Error (kind io) saying
// "<what> '<path>' not found", "is not a regular file" or "cannot open/read", each with how to
// fix it. `what` names the file's role, e.g. "GPT-2 vocab file". Thread-safe (no shared state).
#pragma once

#include <string>
#include <string_view>

namespace ls::data {

// Throws unless path is an existing regular file that can be opened for reading.
void check_readable_file(const std::string& path, std::string_view what);

std::string read_text_file(const std::string& path, std::string_view what);

}  // namespace ls::data
