// Tokenizers: text <-> token ids for the sequence models (language modelling, classification).
//
// Contract: encode() maps text to ids in [0, vocab_size()) and never produces pad_id() or
// eos_id() (special tokens are inserted by the caller, e.g. make_lm_dataset); decode() maps ids
// back to text (pad decodes to nothing, eos to "<|endoftext|>"), so decode(encode(s)) == s for
// every byte string s. An id outside [0, vocab_size()) is an ls::Error. Construction validates
// its files and throws ls::Error naming the file, the line or byte, and what is wrong.
// Thread-safety: a constructed tokenizer is immutable in effect; encode/decode may be called from
// many threads at once (Gpt2BpeTokenizer's word cache is guarded by a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ls::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t pad_id() const = 0;  // fills sequences shorter than seq_len
  virtual int32_t eos_id() const = 0;  // ends a document (end-of-text)
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual std::string name() const = 0;  // e.g. "byte", "gpt2-bpe"
};

// ids 0..255 are the bytes of the text, 256 = pad, 257 = end-of-text (vocab 258).
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kPad = 256;
  static constexpr int32_t kEos = 257;
  int32_t vocab_size() const override { return 258; }
  int32_t pad_id() const override { return kPad; }
  int32_t eos_id() const override { return kEos; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string name() const override { return "byte"; }
};

// GPT-2's byte-level BPE: bytes are mapped to printable code points (bytes_to_unicode), text is
// split into pre-tokens by GPT-2's pattern (contractions, ` ?letters`, ` ?digits`, ` ?other`,
// whitespace; hand-written, see tokenizer.cpp for the Unicode approximation), then each pre-token
// is merged pair by pair, lowest merge rank first. pad = eos = the id of "<|endoftext|>"; a
// vocab without it gets one extra id (vocab_size() = entries + 1) for it.
class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  static constexpr std::string_view kEndOfText = "<|endoftext|>";

  // vocab_json: one JSON object {"token": id, ...}, ids distinct and exactly 0..n-1, holding the
  // 256 byte symbols. merges_txt: an optional "#version" line, then one "left right" pair a
  // line, rank = order; both sides and their concatenation must be in the vocab.
  static Gpt2BpeTokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // The same from the files' contents; the names are used in error messages.
  static Gpt2BpeTokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                       const std::string& vocab_name = "vocab.json",
                                       const std::string& merges_name = "merges.txt");

  Gpt2BpeTokenizer(Gpt2BpeTokenizer&& other) noexcept;
  Gpt2BpeTokenizer& operator=(Gpt2BpeTokenizer&&) = delete;

  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  int32_t pad_id() const override { return eos_; }
  int32_t eos_id() const override { return eos_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string name() const override { return "gpt2-bpe"; }

  // GPT-2's pre-tokenisation alone (exposed for tests): the pieces, which concatenate to text.
  static std::vector<std::string_view> pretokenize(std::string_view text);

 private:
  Gpt2BpeTokenizer() = default;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  std::vector<int32_t> bpe(std::string_view word) const;

  std::vector<std::string> tokens_;                      // id -> token (byte symbols, UTF-8)
  std::unordered_map<std::string, int32_t> ids_;         // token -> id
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  int32_t eos_ = -1;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;  // pre-token -> ids
};

}  // namespace ls::data
