// GCIDE cleaning in two passes per entry: line-level (pronunciations removed, lines joined with
// spaces), then character-level (brackets classified, braces and tags dropped, whitespace
// collapsed). make_lm_dataset encodes document by document into one stream and slices it.
#include <lockstep/data/text_corpus.h>

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <lockstep/error.h>
#include "engine/model/data/text_file.h"

namespace ls::data {
namespace {

constexpr size_t kMaxBracket = 48;  // longest [entity] or [source tag] recognised

// Named GCIDE entities and their ASCII spellings; an empty replacement drops the group.
const std::unordered_map<std::string_view, std::string_view>& named_entities() {
  static const std::unordered_map<std::string_view, std::string_view> table = {
      {"ae", "ae"},      {"AE", "AE"},       {"oe", "oe"},     {"OE", "OE"},   {"imac", "i"},
      {"aum", "a"},      {"asl", "a"},       {"add", "a"},     {"udd", "u"},   {"eth", "th"},
      {"Edh", "Th"},     {"thorn", "th"},    {"th", "th"},     {"ng", "ng"},   {"yogh", "gh"},
      {"schwa", "e"},    {"ccaron", "c"},    {"cacute", "c"},  {"deg", "deg"}, {"root", "root"},
      {"sect", "sect."}, {"para", "para."},  {"times", "x"},   {"divby", "/"}, {"div", "/"},
      {"nbsp", " "},     {"middot", "."},    {"ldqo", "\""},   {"rdqo", "\""}, {"rsquo", "'"},
      {"prime", "'"},    {"bprime", "''"},   {"pounds", "lb"}, {"dagger", ""}, {"dag", ""},
      {"flat", "flat"},  {"sharp", "sharp"}, {"rarr", "->"},   {"?", "?"}};
  return table;
}

bool is_greek_name(std::string_view s) {
  static constexpr std::string_view kNames[] = {
      "alpha",  "beta",   "gamma",   "delta", "epsilon", "zeta",    "eta",  "theta", "iota",
      "kappa",  "lambda", "mu",      "nu",    "xi",      "omicron", "pi",   "rho",   "sigma",
      "sigmat", "tau",    "upsilon", "phi",   "chi",     "psi",     "omega"};
  std::string lower(s);
  if (!lower.empty()) lower[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return std::find(std::begin(kNames), std::end(kNames), lower) != std::end(kNames);
}

bool is_source_tag(std::string_view s) {
  static constexpr std::string_view kPrefixes[] = {"1913 Webster", "Webster 1913", "WordNet", "PJC",
                                                   "+PJC"};
  static constexpr std::string_view kTags[] = {"RHUD", "MW10", "RDH",  "JC",    "GG",
                                               "wn1",  "WE1",  "MI11", "W13(1)"};
  for (std::string_view prefix : kPrefixes) {
    if (s.starts_with(prefix)) return true;
  }
  return std::find(std::begin(kTags), std::end(kTags), s) != std::end(kTags);
}

// An accent entity: one or two letters with at least one mark among = ' ^ ~ . - " ` , *.
bool accent_letters(std::string_view s, std::string& letters) {
  letters.clear();
  size_t marks = 0;
  for (char c : s) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      letters += c;
    } else if (std::strchr("='^~.-\"`,*", c) != nullptr) {
      ++marks;
    } else {
      return false;
    }
  }
  return marks > 0 && !letters.empty() && letters.size() <= 2;
}

// What a bracket group [content] becomes: true and `out` set when it is an entity or a source
// tag; false when it is ordinary bracketed text to keep.
bool replace_bracket(std::string_view raw_content, std::string& out) {
  std::string content;  // whitespace runs as one space: "[1913\n   Webster]" spans lines
  for (char c : raw_content) {
    if (c != ' ' || (!content.empty() && content.back() != ' ')) content += c;
  }
  if (is_source_tag(content)) {
    out.clear();
    return true;
  }
  auto named = named_entities().find(std::string_view(content));
  if (named != named_entities().end()) {
    out = named->second;
    return true;
  }
  if (is_greek_name(content)) {
    out = std::move(content);
    return true;
  }
  return accent_letters(content, out);
}

// Removes `\...\` pronunciations from one line (and the spaces before them); an unmatched
// backslash drops the rest of its line (a pronunciation cut by a line break).
void strip_pronunciations(std::string_view line, std::string& out) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] != '\\') {
      out += line[i];
      continue;
    }
    size_t close = line.find('\\', i + 1);
    while (!out.empty() && out.back() == ' ') out.pop_back();
    if (close == std::string_view::npos) break;
    out += ' ';
    i = close;
  }
  out += ' ';
}

// Character-level pass over one entry's joined lines; appends the clean text and a '\n'.
void clean_entry(std::string_view entry, std::string& out) {
  const size_t start = out.size();
  std::string replacement;
  bool space = false;
  // Pending spaces are written before the next character, except before ',' and ';' (a removed
  // pronunciation leaves "word , v. t.").
  auto emit = [&](char c) {
    if (c == ' ') {
      space = out.size() > start;
      return;
    }
    if (space && c != ',' && c != ';') out += ' ';
    space = false;
    out += c;
  };
  for (size_t i = 0; i < entry.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(entry[i]);
    if (c == '[') {
      size_t close = entry.find(']', i + 1);
      if (close != std::string_view::npos && close - i - 1 <= kMaxBracket) {
        std::string_view content = entry.substr(i + 1, close - i - 1);
        if (content.find('[') == std::string_view::npos && replace_bracket(content, replacement)) {
          for (char r : replacement) emit(r);
          i = close;
          continue;
        }
      }
      emit('[');
    } else if (c == '<') {
      size_t close = entry.find('>', i + 1);
      bool tag = close != std::string_view::npos && close - i < 200 && i + 1 < entry.size() &&
                 (std::isalpha(static_cast<unsigned char>(entry[i + 1])) || entry[i + 1] == '/') &&
                 entry.substr(i + 1, close - i - 1).find('<') == std::string_view::npos;
      if (tag) {
        i = close;
      } else {
        emit('<');
      }
    } else if (c == '{' || c == '}' || c >= 0x7F) {
      continue;
    } else {
      emit(c <= ' ' ? ' ' : static_cast<char>(c));
    }
  }
  if (out.size() > start) out += '\n';
}

bool starts_entry(std::string_view line) {
  return !line.empty() && line[0] != ' ' && line[0] != '\t' &&
         line.find('\\') != std::string_view::npos;
}

std::string gunzip_file(const std::string& path) {
  check_readable_file(path, "GCIDE dictionary");
  gzFile gz = gzopen(path.c_str(), "rb");
  LS_CHECK_IO(gz != nullptr, "GCIDE dictionary '", path, "': cannot open: ", std::strerror(errno),
              "; check its permissions");
  gzbuffer(gz, 1 << 17);
  std::string data;
  std::vector<char> chunk(size_t{1} << 20);
  for (;;) {
    int got = gzread(gz, chunk.data(), static_cast<unsigned>(chunk.size()));
    int err = Z_OK;
    const char* message = gzerror(gz, &err);
    if (got < 0 || err != Z_OK) {
      std::string text = message ? message : "unknown";
      gzclose(gz);
      LS_THROW_IO("GCIDE dictionary '", path,
                  "': corrupt or truncated dictzip/gzip stream (zlib: ", text,
                  "); reinstall the dict-gcide package");
    }
    if (got == 0) break;
    data.append(chunk.data(), static_cast<size_t>(got));
  }
  gzclose(gz);
  return data;
}

}  // namespace

std::string clean_gcide_text(std::string_view raw) {
  std::string out, entry;
  out.reserve(raw.size());
  bool in_entry = false;
  for (size_t pos = 0; pos < raw.size();) {
    size_t eol = raw.find('\n', pos);
    if (eol == std::string_view::npos) eol = raw.size();
    std::string_view line = raw.substr(pos, eol - pos);
    pos = eol + 1;
    if (starts_entry(line)) {
      if (in_entry) clean_entry(entry, out);
      entry.clear();
      in_entry = true;
    }
    if (in_entry) strip_pronunciations(line, entry);
  }
  if (in_entry) clean_entry(entry, out);
  return out;
}

std::string load_gcide_text(const std::string& path) {
  std::string text = clean_gcide_text(gunzip_file(path));
  LS_CHECK_IO(!text.empty(), "GCIDE dictionary '", path,
              "': no dictionary entry found (a line starting in column 0 with a headword and a "
              "\\pronunciation\\); is this a dictd .dict.dz file of GCIDE?");
  return text;
}

Dataset make_lm_dataset(std::string_view text, const Tokenizer& tokenizer, int64_t seq_len,
                        const std::string& name, int64_t max_examples) {
  LS_CHECK(seq_len >= 1, "make_lm_dataset('", name, "'): seq_len is ", seq_len,
           "; it must be >= 1");
  LS_CHECK(max_examples >= 0, "make_lm_dataset('", name, "'): max_examples is ", max_examples,
           "; use 0 for no cap or a positive count");
  const size_t need = max_examples > 0 ? static_cast<size_t>(max_examples * seq_len + 1) : 0;
  std::vector<int32_t> stream;
  for (size_t pos = 0; pos < text.size() && (need == 0 || stream.size() < need);) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view doc = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (doc.empty()) continue;
    std::vector<int32_t> ids = tokenizer.encode(doc);
    stream.insert(stream.end(), ids.begin(), ids.end());
    stream.push_back(tokenizer.eos_id());
  }
  const int64_t available = stream.empty() ? 0 : static_cast<int64_t>(stream.size() - 1) / seq_len;
  LS_CHECK(available >= 1, "make_lm_dataset('", name, "'): the text encodes to ", stream.size(),
           " tokens (with one eos per document), too few for one example of seq_len + 1 = ",
           seq_len + 1, "; use more text or a shorter seq_len");
  Dataset ds;
  ds.name = name;
  ds.count = max_examples > 0 ? std::min(available, max_examples) : available;
  ds.features = seq_len;
  ds.label_width = seq_len;
  ds.classes = tokenizer.vocab_size();
  const size_t n = static_cast<size_t>(ds.count * seq_len);
  ds.tokens.assign(stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(n));
  ds.labels.assign(stream.begin() + 1, stream.begin() + 1 + static_cast<std::ptrdiff_t>(n));
  return ds;
}

DatasetSplit split_tail(const Dataset& ds, double fraction) {
  LS_CHECK(fraction > 0.0 && fraction < 1.0, "split_tail('", ds.name, "'): fraction is ", fraction,
           "; it must be in (0, 1), e.g. 0.05 to hold out 5%");
  int64_t held = std::max<int64_t>(1, std::llround(static_cast<double>(ds.count) * fraction));
  LS_CHECK(held < ds.count, "split_tail('", ds.name, "'): holding out ", held, " of ", ds.count,
           " examples leaves none to train on; use a larger data set or a smaller fraction");
  const int64_t kept = ds.count - held;
  auto part = [&](int64_t first, int64_t count, const char* suffix) {
    Dataset p;
    p.name = ds.name + suffix;
    p.count = count;
    p.features = ds.features;
    p.classes = ds.classes;
    p.label_width = ds.label_width;
    auto slice = [&](const auto& v, int64_t width, auto& dst) {
      if (v.empty()) return;
      dst.assign(v.begin() + first * width, v.begin() + (first + count) * width);
    };
    slice(ds.images, ds.features, p.images);
    slice(ds.tokens, ds.features, p.tokens);
    slice(ds.labels, ds.label_width, p.labels);
    return p;
  };
  return {part(0, kept, "-train"), part(kept, held, "-val")};
}

}  // namespace ls::data
