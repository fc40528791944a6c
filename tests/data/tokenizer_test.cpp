// Tests for ls::data tokenizers: ByteTokenizer ids and round trips; Gpt2BpeTokenizer on the tiny
// fixture in tests/data/fixtures/gpt2 (made by make_fixture.py there, whose reference GPT-2
// implementation printed the expected ids below), GPT-2 pre-tokenisation, and every malformed
// vocab/merges case with its message.
#include <lockstep/data/tokenizer.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/model/data/text_file.h"
#include "tests/data/text_test_util.h"

namespace ls::data {
namespace {

using testing::contains;
using testing::error_of;
using testing::fixture;
using Ids = std::vector<int32_t>;

TEST(ByteTokenizerTest, BytesAreIdsAndSpecialsFollow) {
  ByteTokenizer t;
  EXPECT_EQ(t.vocab_size(), 258);
  EXPECT_EQ(t.pad_id(), 256);
  EXPECT_EQ(t.eos_id(), 257);
  EXPECT_EQ(t.name(), "byte");
  EXPECT_EQ(t.encode("Ab\n\xff"), (Ids{65, 98, 10, 255}));
  EXPECT_EQ(t.encode(""), Ids{});
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(t.decode(t.encode(all)), all);
  EXPECT_EQ(t.decode(Ids{104, 256, 105, 257}), "hi<|endoftext|>");
  EXPECT_TRUE(contains(error_of([&] { t.decode(Ids{1, 258}); }), "id 258 at position 1"));
  EXPECT_TRUE(contains(error_of([&] { t.decode(Ids{-1}); }), "outside the vocab 0..257"));
}

Gpt2BpeTokenizer fixture_tokenizer() {
  return Gpt2BpeTokenizer::from_files(fixture("gpt2/vocab.json"), fixture("gpt2/merges.txt"));
}

TEST(Gpt2BpeTokenizerTest, FixtureMatchesTheReferenceIds) {
  Gpt2BpeTokenizer t = fixture_tokenizer();
  EXPECT_EQ(t.vocab_size(), 275);
  EXPECT_EQ(t.eos_id(), 274);
  EXPECT_EQ(t.pad_id(), 274);
  EXPECT_EQ(t.name(), "gpt2-bpe");
  struct Case {
    std::string text;
    Ids ids;
  };
  const std::vector<Case> cases = {
      {"the", {83, 257}},
      {" the", {258}},
      {"Hello world", {39, 68, 75, 75, 78, 268}},
      {"the world's thing", {83, 257, 268, 269, 256, 71, 260}},
      {"it's 12 o'clock!!", {72, 83, 269, 220, 270, 220, 78, 6, 66, 75, 78, 66, 74, 0, 0}},
      {"a  b\n\nc ", {64, 220, 220, 65, 198, 198, 66, 220}},
      {"h\u00e9llo w\u00f6rld", {71, 127, 102, 75, 75, 78, 264, 127, 114, 81, 267}},
      {"x'S 2024", {87, 6, 50, 220, 17, 15, 17, 19}},
      {"\tindent\n  two", {197, 259, 67, 68, 77, 83, 198, 220, 256, 86, 78}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(t.encode(c.text), c.ids) << c.text;
    EXPECT_EQ(t.encode(c.text), c.ids) << c.text << " (cached)";
    EXPECT_EQ(t.decode(c.ids), c.text);
  }
  EXPECT_EQ(t.decode(Ids{258, 274}), " the<|endoftext|>");
  EXPECT_TRUE(contains(error_of([&] { t.decode(Ids{275}); }), "id 275 at position 0"));
}

TEST(Gpt2BpeTokenizerTest, PretokenizeFollowsGpt2Pattern) {
  using Pieces = std::vector<std::string_view>;
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize("it's 12 o'clock!!"),
            (Pieces{"it", "'s", " 12", " o", "'", "clock", "!!"}));
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize("x \n\n y  "), (Pieces{"x", " \n\n", " y", "  "}));
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize("we'll they'RE ab12cd"),
            (Pieces{"we", "'ll", " they", "'", "RE", " ab", "12", "cd"}));
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize(" !?x 3.5%"), (Pieces{" !?", "x", " 3", ".", "5", "%"}));
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize("caf\u00e9 \u00bd\u00d7\u03b1\u03b2"),
            (Pieces{"caf\u00e9", " \u00bd", "\u00d7", "\u03b1\u03b2"}));
  const std::string invalid_utf8 = std::string("\xff\xfe") + "a";
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize(invalid_utf8), (Pieces{"\xff\xfe", "a"}));
  EXPECT_EQ(Gpt2BpeTokenizer::pretokenize(" "), (Pieces{" "}));
  EXPECT_TRUE(Gpt2BpeTokenizer::pretokenize("").empty());
}

TEST(Gpt2BpeTokenizerTest, EveryByteStringRoundTrips) {
  Gpt2BpeTokenizer t = fixture_tokenizer();
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  all += " the world's 12 \xe2\x82\xac\xff";
  Ids ids = t.encode(all);
  for (int32_t id : ids) EXPECT_NE(id, t.eos_id());
  EXPECT_EQ(t.decode(ids), all);
}

TEST(Gpt2BpeTokenizerTest, VocabWithoutEndOfTextGetsAnExtraId) {
  std::string vocab = read_text_file(fixture("gpt2/vocab.json"), "vocab");
  size_t at = vocab.find(", \"<|endoftext|>\": 274");
  ASSERT_NE(at, std::string::npos);
  vocab.erase(at, std::string(", \"<|endoftext|>\": 274").size());
  std::string merges = read_text_file(fixture("gpt2/merges.txt"), "merges");
  Gpt2BpeTokenizer t = Gpt2BpeTokenizer::from_strings(vocab, merges);
  EXPECT_EQ(t.vocab_size(), 275);
  EXPECT_EQ(t.eos_id(), 274);
  EXPECT_EQ(t.encode(" the"), Ids{258});
  EXPECT_EQ(t.decode(Ids{274}), "<|endoftext|>");
}

std::string vocab_error(const std::string& vocab) {
  return error_of([&] { Gpt2BpeTokenizer::from_strings(vocab, "", "v.json", "m.txt"); });
}

TEST(Gpt2BpeTokenizerTest, MalformedVocabIsAClearError) {
  EXPECT_TRUE(contains(vocab_error("[1, 2]"), "'v.json': expected a JSON object"));
  EXPECT_TRUE(contains(vocab_error("{\"a\": 0"), "v.json"));
  EXPECT_TRUE(contains(vocab_error("{}"), "holds 0 tokens"));
  EXPECT_TRUE(contains(vocab_error("{\"a\": 1.5}"), "id of token \"a\" must be a non-negative"));
  EXPECT_TRUE(contains(vocab_error("{\"a\": -1}"), "not -1"));
  EXPECT_TRUE(contains(vocab_error("{\"a\": \"0\"}"), "not a non-number"));
  EXPECT_TRUE(contains(vocab_error("{\"a\": 0, \"b\": 2}"), "must have the ids 0..1"));
  EXPECT_TRUE(
      contains(vocab_error("{\"a\": 0, \"b\": 0}"), "id 0 is given to both \"a\" and \"b\""));
  EXPECT_TRUE(contains(vocab_error("{\"a\": 0, \"a\": 1}"), "v.json"));
  EXPECT_TRUE(contains(vocab_error("{\"!\": 0}"), "lacks the symbol \"\xc4\x80\" of byte 0"));
}

std::string merges_error(const std::string& merges) {
  std::string vocab = read_text_file(fixture("gpt2/vocab.json"), "vocab");
  return error_of([&] { Gpt2BpeTokenizer::from_strings(vocab, merges, "v.json", "m.txt"); });
}

TEST(Gpt2BpeTokenizerTest, MalformedMergesIsAClearError) {
  EXPECT_EQ(merges_error("#version: 0.2\n\xc4\xa0 t\r\nh e\n\n"), "<no error>");
  EXPECT_TRUE(contains(merges_error("h e\nabc\n"), "'m.txt' line 2: \"abc\" is not a pair"));
  EXPECT_TRUE(contains(merges_error("h e f\n"), "line 1: \"h e f\" is not a pair"));
  EXPECT_TRUE(contains(merges_error("h  e\n"), "is not a pair"));
  EXPECT_TRUE(contains(merges_error(" h\n"), "is not a pair"));
  EXPECT_TRUE(contains(merges_error("h e\nq zz\n"), "line 2: symbol \"zz\" is not in the vocab"));
  EXPECT_TRUE(contains(merges_error("x y\n"), "line 1: the merged symbol \"xy\" is not in"));
  EXPECT_TRUE(
      contains(merges_error("h e\ni n\nh e\n"), "line 3: the pair \"h e\" is listed twice"));
  EXPECT_TRUE(contains(merges_error("#version: 0.2\n#version: 0.2\n"), "line 2"));
}

TEST(Gpt2BpeTokenizerTest, MissingFilesAreClearErrors) {
  std::string e = error_of(
      [] { Gpt2BpeTokenizer::from_files("/nonexistent/vocab.json", fixture("gpt2/merges.txt")); });
  EXPECT_TRUE(contains(e, "GPT-2 vocab file '/nonexistent/vocab.json' not found"));
  e = error_of([] { Gpt2BpeTokenizer::from_files(fixture("gpt2/vocab.json"), fixture("gpt2")); });
  EXPECT_TRUE(contains(e, "GPT-2 merges file"));
  EXPECT_TRUE(contains(e, "is not a regular file"));
}

}  // namespace
}  // namespace ls::data
