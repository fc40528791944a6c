// data.noun parser: licence header lines (two leading spaces) first, then one synset a line,
// `offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt (symbol offset pos source/target)*
// | gloss`, every field checked so a truncated or foreign file fails at its first bad line.
#include <lockstep/data/wordnet.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <vector>

#include <lockstep/error.h>
#include "engine/model/data/splitmix64.h"
#include "engine/model/data/text_file.h"

namespace ls::data {
namespace {

struct Synset {
  int64_t offset = 0;
  int lex_filenum = 0;
  std::string_view first_word;
  std::string_view gloss;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool all_of_digits(std::string_view s, int base) {
  const char* digits = base == 16 ? "0123456789abcdefABCDEF" : "0123456789";
  return !s.empty() && s.find_first_not_of(digits) == std::string_view::npos;
}

// Parses one synset line; `where` is "data.noun '<path>' line N" for the messages.
class LineParser {
 public:
  LineParser(std::string_view line, const std::string& where) : where_(where) {
    size_t bar = line.find('|');
    LS_CHECK_IO(bar != std::string_view::npos, where_,
                ": no '|' before the gloss; the line is cut off or not a WordNet synset line "
                "(is the file truncated?)");
    head_ = line.substr(0, bar);
    gloss_ = trim(line.substr(bar + 1));
  }

  Synset parse() {
    Synset s;
    s.offset = number(field("synset_offset"), 10, 8, "synset_offset", "8 decimal digits");
    s.lex_filenum =
        static_cast<int>(number(field("lex_filenum"), 10, 2, "lex_filenum", "2 decimal digits"));
    LS_CHECK_IO(s.lex_filenum <= 44, where_, ": lex_filenum ", s.lex_filenum,
                " is not a WordNet lexicographer file (00..44)");
    std::string_view type = field("ss_type");
    LS_CHECK_IO(type == "n", where_, ": ss_type is '", type,
                "' but data.noun holds nouns ('n'); is this data.noun (not data.verb/adj/adv)?");
    int64_t words = number(field("w_cnt"), 16, 2, "w_cnt", "2 hex digits");
    LS_CHECK_IO(words >= 1, where_, ": w_cnt is 0; a synset has at least one word");
    for (int64_t w = 0; w < words; ++w) {
      std::string_view word = field("word");
      if (w == 0) s.first_word = word;
      number(field("lex_id"), 16, 1, "lex_id", "1 hex digit");
    }
    int64_t pointers = number(field("p_cnt"), 10, 3, "p_cnt", "3 decimal digits");
    for (int64_t p = 0; p < pointers; ++p) {
      field("pointer_symbol");
      number(field("pointer offset"), 10, 8, "pointer offset", "8 decimal digits");
      std::string_view pos = field("pointer pos");
      LS_CHECK_IO(pos.size() == 1 && std::string_view("nvars").find(pos[0]) != std::string::npos,
                  where_, ": pointer ", p + 1, " has part of speech '", pos,
                  "'; expected one of n v a r s");
      number(field("pointer source/target"), 16, 4, "pointer source/target", "4 hex digits");
    }
    std::string_view extra = next();
    LS_CHECK_IO(extra.empty(), where_, ": unexpected field '", extra, "' after the ", pointers,
                " pointers that p_cnt announces; data.noun synsets end with '| gloss'");
    LS_CHECK_IO(!gloss_.empty(), where_, ": the gloss after '|' is empty");
    s.gloss = gloss_;
    return s;
  }

 private:
  std::string_view next() {
    while (pos_ < head_.size() && head_[pos_] == ' ') ++pos_;
    size_t end = head_.find(' ', pos_);
    if (end == std::string_view::npos) end = head_.size();
    std::string_view f = head_.substr(pos_, end - pos_);
    pos_ = end;
    return f;
  }
  std::string_view field(const char* name) {
    std::string_view f = next();
    LS_CHECK_IO(!f.empty(), where_, ": the line ends before its ", name,
                " field; the line is cut off or malformed");
    return f;
  }
  int64_t number(std::string_view f, int base, size_t width, const char* name,
                 const char* expected) {
    LS_CHECK_IO(f.size() == width && all_of_digits(f, base), where_, ": ", name, " is '", f,
                "'; expected ", expected);
    return std::stoll(std::string(f), nullptr, base);
  }

  const std::string& where_;
  std::string_view head_, gloss_;
  size_t pos_ = 0;
};

int class_of(int lex_filenum) {
  auto it = std::find(kSupersenseLexFiles.begin(), kSupersenseLexFiles.end(), lex_filenum);
  return it == kSupersenseLexFiles.end() ? -1 : static_cast<int>(it - kSupersenseLexFiles.begin());
}

void append_example(const Tokenizer& tokenizer, int64_t seq_len, const Synset& s, int label,
                    Dataset& ds) {
  std::string text(s.first_word);
  std::replace(text.begin(), text.end(), '_', ' ');
  text.append(": ").append(s.gloss);
  std::vector<int32_t> ids = tokenizer.encode(text);
  ids.resize(static_cast<size_t>(seq_len), tokenizer.pad_id());
  ds.tokens.insert(ds.tokens.end(), ids.begin(), ids.end());
  ds.labels.push_back(label);
  ++ds.count;
}

}  // namespace

bool wordnet_is_test_offset(int64_t offset) {
  return splitmix64(static_cast<uint64_t>(offset)) % 10 == 0;
}

Dataset load_wordnet_supersenses(const Tokenizer& tokenizer, int64_t seq_len, Split split,
                                 const std::string& path) {
  LS_CHECK(seq_len >= 1, "load_wordnet_supersenses: seq_len is ", seq_len, "; it must be >= 1");
  const std::string text = read_text_file(path, "WordNet data.noun");
  Dataset ds;
  ds.name = split == Split::kTest ? "wordnet-supersenses-test" : "wordnet-supersenses-train";
  ds.features = seq_len;
  ds.classes = kSupersenseClasses;
  ds.label_width = 1;
  int64_t line_no = 0, synsets = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    ++line_no;
    const std::string where = "WordNet data.noun '" + path + "' line " + std::to_string(line_no);
    LS_CHECK_IO(eol != std::string::npos, where,
                " is cut off (no newline at the end of the file); the file is truncated, "
                "reinstall wordnet-base");
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    if (synsets == 0 && line.starts_with("  ")) continue;  // the licence header
    LS_CHECK_IO(!trim(line).empty(), where, ": empty line; data.noun has one synset a line");
    Synset s = LineParser(line, where).parse();
    ++synsets;
    int label = class_of(s.lex_filenum);
    if (label < 0 || wordnet_is_test_offset(s.offset) != (split == Split::kTest)) continue;
    append_example(tokenizer, seq_len, s, label, ds);
  }
  LS_CHECK_IO(synsets > 0, "WordNet data.noun '", path, "' holds no synset lines (only ", line_no,
              " header or no lines); is it data.noun?");
  LS_CHECK_IO(ds.count > 0, "WordNet data.noun '", path, "': none of its ", synsets,
              " synsets is an animal, artifact, food or plant (lex_filenum 05, 06, 13, 20) in the ",
              split == Split::kTest ? "test" : "train", " split; is it data.noun?");
  return ds;
}

std::array<int64_t, kSupersenseClasses> supersense_counts(const Dataset& ds) {
  LS_CHECK(ds.classes == kSupersenseClasses && ds.label_width == 1, "supersense_counts: data set '",
           ds.name, "' has ", ds.classes, " classes and ", ds.label_width,
           " labels per example; expected a supersense data set (4 classes, 1 label)");
  std::array<int64_t, kSupersenseClasses> counts{};
  for (int32_t label : ds.labels) {
    LS_CHECK(label >= 0 && label < kSupersenseClasses, "supersense_counts: data set '", ds.name,
             "' holds label ", label, ", outside 0..3");
    ++counts[static_cast<size_t>(label)];
  }
  return counts;
}

std::string describe_supersense_counts(const Dataset& ds) {
  auto counts = supersense_counts(ds);
  std::ostringstream out;
  out << ds.name << ": " << ds.count << " examples:";
  for (int c = 0; c < kSupersenseClasses; ++c) {
    out << (c ? ", " : " ") << kSupersenseNames[static_cast<size_t>(c)] << ' '
        << counts[static_cast<size_t>(c)];
  }
  int64_t majority = *std::max_element(counts.begin(), counts.end());
  out << "; majority class " << std::fixed << std::setprecision(3)
      << (ds.count ? static_cast<double>(majority) / static_cast<double>(ds.count) : 0.0);
  return out.str();
}

}  // namespace ls::data
