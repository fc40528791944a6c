// ByteTokenizer and GPT-2's byte-level BPE. The pre-tokeniser is hand-written (std::regex has no
// \p{L} or \p{N}) and follows GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// alternative by alternative, including the backtracking of \s+(?!\S) (a run of whitespace
// before a word leaves its last character to be the word's leading space when it is ' ').
// Approximation: Unicode classes come from tables (is_letter / is_number / is_space below) that
// are exact for ASCII and Latin-1 and cover Latin Extended, IPA, Greek, Cyrillic, Armenian,
// Hebrew, Arabic, Devanagari, Thai, kana, CJK and Hangul letters, and the common digit and
// number-form blocks; any other code point (e.g. Georgian or Tamil letters, emoji) counts as
// "other", as do combining marks (as in GPT-2). Bytes that are not valid UTF-8 count as "other",
// one byte each.
#include <lockstep/data/tokenizer.h>

#include <array>
#include <limits>

#include <lockstep/error.h>
#include "engine/core/json_reader.h"
#include "engine/model/data/text_file.h"

namespace ls::data {
namespace {

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the code point at s[i]; sets len to its byte length. Invalid UTF-8: one byte, and
// valid = false.
uint32_t decode_utf8(std::string_view s, size_t i, size_t& len, bool& valid) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  uint8_t c = b(0);
  valid = true;
  len = 1;
  if (c < 0x80) return c;
  size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    valid = false;
    return c;
  }
  uint32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) {
      valid = false;
      return c;
    }
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  const uint32_t min_cp = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    valid = false;
    return c;
  }
  len = n;
  return cp;
}

struct Range {
  uint32_t lo, hi;
};

bool in_ranges(uint32_t cp, std::span<const Range> ranges) {
  for (const Range& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

// Python's str.isspace / regex \s.
bool is_space(uint32_t cp) {
  static constexpr Range kSpace[] = {
      {0x09, 0x0D},     {0x1C, 0x20},     {0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
      {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
  return in_ranges(cp, kSpace);
}

// \p{N}: decimal digits, superscripts/fractions, number forms, circled numbers.
bool is_number(uint32_t cp) {
  static constexpr Range kNumber[] = {
      {'0', '9'},       {0xB2, 0xB3},     {0xB9, 0xB9},     {0xBC, 0xBE},
      {0x660, 0x669},   {0x6F0, 0x6F9},   {0x966, 0x96F},   {0x2070, 0x2070},
      {0x2074, 0x2079}, {0x2080, 0x2089}, {0x2150, 0x2189}, {0x2460, 0x249B},
      {0x24EA, 0x24FF}, {0x3007, 0x3007}, {0x3021, 0x3029}, {0xFF10, 0xFF19}};
  return in_ranges(cp, kNumber);
}

// \p{L} (approximate outside ASCII and Latin-1; see the file comment).
bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  static constexpr Range kLetter[] = {
      {0xAA, 0xAA},     {0xB5, 0xB5},     {0xBA, 0xBA},     {0xC0, 0xD6},     {0xD8, 0xF6},
      {0xF8, 0x2C1},    {0x2C6, 0x2D1},   {0x2E0, 0x2E4},   {0x370, 0x374},   {0x376, 0x37D},
      {0x37F, 0x37F},   {0x386, 0x386},   {0x388, 0x3F5},   {0x3F7, 0x481},   {0x48A, 0x52F},
      {0x531, 0x556},   {0x561, 0x587},   {0x5D0, 0x5EA},   {0x620, 0x64A},   {0x671, 0x6D3},
      {0x904, 0x939},   {0xE01, 0xE30},   {0xE32, 0xE33},   {0xE40, 0xE46},   {0x1E00, 0x1FFF},
      {0x3041, 0x3096}, {0x30A1, 0x30FA}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3},
      {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}};
  return in_ranges(cp, kLetter);
}

enum class Cls { kLetter, kNumber, kSpace, kOther };

struct Scanner {
  std::string_view s;
  // Class and length of the character at i.
  Cls at(size_t i, size_t& len) const {
    bool valid;
    uint32_t cp = decode_utf8(s, i, len, valid);
    if (!valid) return Cls::kOther;
    if (is_letter(cp)) return Cls::kLetter;
    if (is_number(cp)) return Cls::kNumber;
    if (is_space(cp)) return Cls::kSpace;
    return Cls::kOther;
  }
  // End of the run of class c starting at i (i itself when s[i] is not of class c).
  size_t run(size_t i, Cls c) const {
    size_t len;
    while (i < s.size() && at(i, len) == c) i += len;
    return i;
  }
};

// Length of the GPT-2 pre-token starting at i (> 0).
size_t next_piece(const Scanner& sc, size_t i) {
  std::string_view s = sc.s;
  if (s[i] == '\'') {
    for (std::string_view c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
      if (s.substr(i + 1, c.size()) == c) return 1 + c.size();
    }
  }
  size_t start = i + (s[i] == ' ' && i + 1 < s.size() ? 1 : 0);  // ` ?`
  size_t len;
  Cls c = sc.at(start, len);
  if (c != Cls::kSpace) return sc.run(start, c) - i;  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?other+`
  // s[i] is whitespace (a lone trailing ' ' also lands here as kSpace at i).
  size_t end = sc.run(i, Cls::kSpace);
  if (end == s.size()) return end - i;  // \s+(?!\S) at the end of the text
  // \s+(?!\S) backtracks to leave the last whitespace character before the non-space.
  size_t last = i, l = 0;
  for (size_t k = i; k < end; k += l) {
    sc.at(k, l);
    last = k;
  }
  return last > i ? last - i : end - i;  // else \s+ (a single whitespace character)
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to
// U+0100.. in byte order, so every byte becomes a visible character.
struct ByteMap {
  std::array<std::string, 256> symbol;  // byte -> UTF-8 of its code point
  std::array<int16_t, 324> byte_of;     // code point -> byte, or -1
  ByteMap() {
    byte_of.fill(-1);
    uint32_t extra = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? b : extra++;
      append_utf8(cp, symbol[b]);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    LS_CHECK(id >= 0 && id < vocab_size(), "ByteTokenizer::decode: id ", id, " at position ", i,
             " is outside the vocab 0..", vocab_size() - 1);
    if (id < 256) out += static_cast<char>(id);
    if (id == kEos) out += Gpt2BpeTokenizer::kEndOfText;
  }
  return out;
}

std::vector<std::string_view> Gpt2BpeTokenizer::pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  Scanner sc{text};
  for (size_t i = 0; i < text.size();) {
    size_t n = next_piece(sc, i);
    LS_ASSERT(n > 0 && i + n <= text.size(), "pretokenize made no progress at byte ", i);
    pieces.push_back(text.substr(i, n));
    i += n;
  }
  return pieces;
}

Gpt2BpeTokenizer::Gpt2BpeTokenizer(Gpt2BpeTokenizer&& other) noexcept
    : tokens_(std::move(other.tokens_)),
      ids_(std::move(other.ids_)),
      merge_rank_(std::move(other.merge_rank_)),
      eos_(other.eos_),
      cache_(std::move(other.cache_)) {}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_files(const std::string& vocab_json,
                                              const std::string& merges_txt) {
  return from_strings(read_text_file(vocab_json, "GPT-2 vocab file"),
                      read_text_file(merges_txt, "GPT-2 merges file"), vocab_json, merges_txt);
}

Gpt2BpeTokenizer Gpt2BpeTokenizer::from_strings(std::string_view vocab_json,
                                                std::string_view merges_txt,
                                                const std::string& vocab_name,
                                                const std::string& merges_name) {
  Gpt2BpeTokenizer t;
  JsonLimits limits;
  limits.max_bytes = size_t{64} << 20;  // GPT-2's vocab.json is 1 MB
  limits.max_depth = 2;
  JsonValue root = parse_json(vocab_json, vocab_name, limits);
  LS_CHECK_IO(root.is_object(), "GPT-2 vocab file '", vocab_name, "': expected a JSON object ",
              "{\"token\": id, ...} but it holds ", json_kind_name(root.kind()));
  const auto& members = root.members();
  LS_CHECK_IO(!members.empty() && members.size() < size_t{std::numeric_limits<int32_t>::max()},
              "GPT-2 vocab file '", vocab_name, "' holds ", members.size(),
              " tokens; expected a non-empty vocab");
  const int64_t n = static_cast<int64_t>(members.size());
  t.tokens_.assign(members.size(), std::string());
  std::vector<bool> seen(members.size(), false);
  for (const auto& [token, value] : members) {
    const std::string& text = value.is_number() ? value.number_text() : std::string();
    bool integer = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
    LS_CHECK_IO(integer && text.size() <= 10, "GPT-2 vocab file '", vocab_name, "' byte ",
                value.offset(), ": the id of token \"", token,
                "\" must be a non-negative integer, not ",
                value.is_number() ? text : "a non-number");
    int64_t id = std::stoll(text);
    LS_CHECK_IO(id < n, "GPT-2 vocab file '", vocab_name, "': token \"", token, "\" has id ", id,
                " but the ", n, " tokens must have the ids 0..", n - 1);
    LS_CHECK_IO(!seen[static_cast<size_t>(id)], "GPT-2 vocab file '", vocab_name, "': id ", id,
                " is given to both \"", t.tokens_[static_cast<size_t>(id)], "\" and \"", token,
                "\"; every token needs its own id");
    seen[static_cast<size_t>(id)] = true;
    t.tokens_[static_cast<size_t>(id)] = token;
    t.ids_.emplace(token, static_cast<int32_t>(id));
  }
  const ByteMap& bytes = byte_map();
  for (int b = 0; b < 256; ++b) {
    LS_CHECK_IO(t.ids_.count(bytes.symbol[b]), "GPT-2 vocab file '", vocab_name,
                "' lacks the symbol \"", bytes.symbol[b], "\" of byte ", b,
                "; a byte-level BPE vocab must hold all 256 byte symbols");
  }
  auto eos = t.ids_.find(std::string(kEndOfText));
  if (eos != t.ids_.end()) {
    t.eos_ = eos->second;
  } else {
    t.eos_ = static_cast<int32_t>(t.tokens_.size());
    t.tokens_.emplace_back(kEndOfText);
  }

  int64_t line_no = 0;
  for (size_t pos = 0; pos < merges_txt.size();) {
    size_t eol = merges_txt.find('\n', pos);
    if (eol == std::string_view::npos) eol = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    size_t space = line.find(' ');
    bool two = space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
               line.find(' ', space + 1) == std::string_view::npos;
    LS_CHECK_IO(two, "GPT-2 merges file '", merges_name, "' line ", line_no, ": \"", line,
                "\" is not a pair \"left right\" (two symbols separated by one space)");
    std::string left(line.substr(0, space)), right(line.substr(space + 1));
    for (const std::string* side : {&left, &right}) {
      LS_CHECK_IO(t.ids_.count(*side), "GPT-2 merges file '", merges_name, "' line ", line_no,
                  ": symbol \"", *side, "\" is not in the vocab '", vocab_name,
                  "'; are the two files from the same tokenizer?");
    }
    LS_CHECK_IO(t.ids_.count(left + right), "GPT-2 merges file '", merges_name, "' line ", line_no,
                ": the merged symbol \"", left + right, "\" is not in the vocab '", vocab_name,
                "'; are the two files from the same tokenizer?");
    bool fresh = t.merge_rank_.emplace(std::string(line), static_cast<int32_t>(line_no)).second;
    LS_CHECK_IO(fresh, "GPT-2 merges file '", merges_name, "' line ", line_no, ": the pair \"",
                line, "\" is listed twice");
  }
  return t;
}

std::vector<int32_t> Gpt2BpeTokenizer::bpe(std::string_view word) const {
  const ByteMap& bytes = byte_map();
  std::vector<std::string> symbols;
  symbols.reserve(word.size());
  for (char c : word) symbols.push_back(bytes.symbol[static_cast<uint8_t>(c)]);
  std::string key;
  while (symbols.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
      auto it = merge_rank_.find(key);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        best_at = i;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    // Merge every non-overlapping occurrence of the best pair, left to right (as GPT-2 does).
    const std::string left = symbols[best_at], right = symbols[best_at + 1];
    std::vector<std::string> merged;
    merged.reserve(symbols.size());
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        merged.push_back(left + right);
        i += 2;
      } else {
        merged.push_back(std::move(symbols[i]));
        i += 1;
      }
    }
    symbols = std::move(merged);
  }
  std::vector<int32_t> ids;
  ids.reserve(symbols.size());
  for (const std::string& s : symbols) {
    auto it = ids_.find(s);
    LS_ASSERT(it != ids_.end(), "BPE symbol \"", s, "\" missing from the checked vocab");
    ids.push_back(it->second);
  }
  return ids;
}

void Gpt2BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  constexpr size_t kMaxCached = size_t{1} << 20;
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = bpe(word);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCached) cache_.clear();
  cache_.emplace(std::move(key), std::move(ids));
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (std::string_view piece : pretokenize(text)) encode_word(piece, ids);
  return ids;
}

std::string Gpt2BpeTokenizer::decode(std::span<const int32_t> ids) const {
  const ByteMap& bytes = byte_map();
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    LS_CHECK(id >= 0 && id < vocab_size(), "Gpt2BpeTokenizer::decode: id ", id, " at position ", i,
             " is outside the vocab 0..", vocab_size() - 1);
    const std::string& token = tokens_[static_cast<size_t>(id)];
    std::string decoded;
    bool byte_symbols = true;
    for (size_t k = 0, len = 0; k < token.size() && byte_symbols; k += len) {
      bool valid;
      uint32_t cp = decode_utf8(token, k, len, valid);
      byte_symbols = valid && cp < bytes.byte_of.size() && bytes.byte_of[cp] >= 0;
      if (byte_symbols) decoded += static_cast<char>(bytes.byte_of[cp]);
    }
    out += byte_symbols ? decoded : token;  // special tokens outside the byte map: verbatim
  }
  return out;
}

}  // namespace ls::data
