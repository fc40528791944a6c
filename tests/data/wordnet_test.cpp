// Tests for ls::data::load_wordnet_supersenses on hand-made data.noun excerpts in
// tests/data/fixtures/wordnet (exact tokens, labels, split), every malformed-line case with its
// file and line in the message, and, when wordnet-base is installed, the real data.noun counts.
#include <lockstep/data/wordnet.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/data/text_file.h"
#include "tests/data/text_test_util.h"

namespace ls::data {
namespace {

using testing::contains;
using testing::error_of;
using testing::fixture;
using Counts = std::array<int64_t, kSupersenseClasses>;

std::vector<int32_t> padded(const std::string& text, size_t len) {
  std::vector<int32_t> ids = ByteTokenizer().encode(text);
  ids.resize(len, ByteTokenizer::kPad);
  return ids;
}

std::vector<int32_t> example(const Dataset& ds, int64_t i) {
  auto first = ds.tokens.begin() + i * ds.features;
  return std::vector<int32_t>(first, first + ds.features);
}

TEST(WordnetTest, FixtureSplitsAndEncodes) {
  ByteTokenizer t;
  Dataset train = load_wordnet_supersenses(t, 32, Split::kTrain, fixture("wordnet/data.noun"));
  EXPECT_EQ(train.name, "wordnet-supersenses-train");
  EXPECT_EQ(train.count, 4);
  EXPECT_EQ(train.features, 32);
  EXPECT_EQ(train.classes, 4);
  EXPECT_EQ(train.label_width, 1);
  EXPECT_TRUE(train.images.empty());
  EXPECT_EQ(train.labels, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(example(train, 0), padded("dog: a member of the genus Canis", 32));
  EXPECT_EQ(example(train, 2), padded("apple pie: pie containing sliced", 32));
  EXPECT_EQ(supersense_counts(train), (Counts{1, 1, 1, 1}));

  Dataset test = load_wordnet_supersenses(t, 32, Split::kTest, fixture("wordnet/data.noun"));
  EXPECT_EQ(test.name, "wordnet-supersenses-test");
  EXPECT_EQ(test.labels, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(example(test, 1), padded("fern: flowerless plant", 32));  // 10 pads
  EXPECT_EQ(supersense_counts(test), (Counts{1, 0, 0, 1}));
  EXPECT_EQ(describe_supersense_counts(test),
            "wordnet-supersenses-test: 2 examples: animal 1, artifact 0, food 0, plant 1; "
            "majority class 0.500");
  EXPECT_TRUE(wordnet_is_test_offset(1000009));
  EXPECT_FALSE(wordnet_is_test_offset(1000002));
}

TEST(WordnetTest, Gpt2PadIsEndOfText) {
  auto t = Gpt2BpeTokenizer::from_files(fixture("gpt2/vocab.json"), fixture("gpt2/merges.txt"));
  Dataset test = load_wordnet_supersenses(t, 40, Split::kTest, fixture("wordnet/data.noun"));
  std::vector<int32_t> fern = t.encode("fern: flowerless plant");
  ASSERT_LT(fern.size(), 40u);
  fern.resize(40, 274);
  EXPECT_EQ(example(test, 1), fern);
}

std::string load_error(const std::string& path) {
  return error_of([&] { load_wordnet_supersenses(ByteTokenizer(), 8, Split::kTrain, path); });
}

TEST(WordnetTest, BadFixtureFilesNameFileAndLine) {
  std::string e = load_error(fixture("wordnet/data.noun.truncated"));
  EXPECT_TRUE(contains(e, "data.noun.truncated' line 11 is cut off")) << e;
  e = load_error(fixture("wordnet/data.noun.malformed"));
  EXPECT_TRUE(contains(e, "data.noun.malformed' line 6: the line ends before its lex_id")) << e;
  e = load_error(fixture("wordnet/data.verb"));
  EXPECT_TRUE(contains(e, "data.verb' line 2: ss_type is 'v'")) << e;
  e = load_error(fixture("wordnet/missing.noun"));
  EXPECT_TRUE(contains(e, "WordNet data.noun '" + fixture("wordnet/missing.noun") + "' not found"));
  EXPECT_TRUE(contains(load_error(fixture("wordnet")), "is not a regular file"));
  EXPECT_TRUE(contains(error_of([] {
                         load_wordnet_supersenses(ByteTokenizer(), 0, Split::kTest,
                                                  fixture("wordnet/data.noun"));
                       }),
                       "seq_len is 0"));
}

class WordnetLineTest : public testing::TempDirTest {
 protected:
  // The error for a file of a header line and `body`.
  std::string error_for(const std::string& body) {
    return load_error(write("data.noun", "  1 header  \n" + body));
  }
};

TEST_F(WordnetLineTest, MalformedLines) {
  const std::string good = "01000002 05 n 01 dog 0 000 | a dog  \n";
  EXPECT_EQ(error_for(good), "<no error>");
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"01000002 05 n 01 dog 0 000 a dog\n", "line 2: no '|' before the gloss"},
      {"1000002 05 n 01 dog 0 000 | a dog\n", "line 2: synset_offset is '1000002'; expected 8"},
      {"01000002 5 n 01 dog 0 000 | a dog\n", "lex_filenum is '5'"},
      {"01000002 77 n 01 dog 0 000 | a dog\n", "lex_filenum 77 is not"},
      {"01000002 05 n 0g dog 0 000 | a dog\n", "w_cnt is '0g'; expected 2 hex digits"},
      {"01000002 05 n 00 000 | a dog\n", "w_cnt is 0"},
      {"01000002 05 n 01 dog x 000 | a dog\n", "lex_id is 'x'"},
      {"01000002 05 n 01 dog 0 1 | a dog\n", "p_cnt is '1'"},
      {"01000002 05 n 01 dog 0 001 @ 01000001 n | a dog\n", "before its pointer source/target"},
      {"01000002 05 n 01 dog 0 001 @ 01000001 q 0000 | a dog\n", "part of speech 'q'"},
      {"01000002 05 n 01 dog 0 001 @ 0100001 n 0000 | a dog\n", "pointer offset is '0100001'"},
      {"01000002 05 n 01 dog 0 000 02 | a dog\n", "unexpected field '02' after the 0 pointers"},
      {"01000002 05 n 01 dog 0 000 |   \n", "the gloss after '|' is empty"},
      {"01000002 05 n\n", "line 2: no '|'"},
      {"01000002 05 n | x\n", "before its w_cnt field"},
      {good + "\n" + good, "line 3: empty line"},
      {good + "  2 header again\n", "line 3: no '|' before the gloss"},
      {"", "holds no synset lines"},
      {"01000002 07 n 01 run 0 000 | a run\n", "none of its 1 synsets is an animal"},
  };
  for (const Case& c : cases) {
    std::string e = error_for(c.line);
    EXPECT_TRUE(contains(e, c.message)) << c.line;
    EXPECT_TRUE(contains(e, (dir_ / "data.noun").string())) << c.line;
  }
}

TEST(WordnetTest, SupersenseCountsChecksItsInput) {
  Dataset ds;
  ds.name = "other";
  ds.classes = 10;
  EXPECT_TRUE(contains(error_of([&] { supersense_counts(ds); }), "has 10 classes"));
  ds.classes = 4;
  ds.labels = {0, 4};
  EXPECT_TRUE(contains(error_of([&] { supersense_counts(ds); }), "holds label 4"));
}

TEST(WordnetTest, RealDataNounIfInstalled) {
  if (!std::filesystem::exists(kWordnetNounPath)) {
    GTEST_SKIP() << kWordnetNounPath << " (wordnet-base) absent";
  }
  ByteTokenizer t;
  Dataset train = load_wordnet_supersenses(t, 64, Split::kTrain);
  Dataset test = load_wordnet_supersenses(t, 64, Split::kTest);
  Counts a = supersense_counts(train), b = supersense_counts(test);
  // The documented WordNet 3.0 counts, and the fixed split of them.
  EXPECT_EQ(a[0] + b[0], 7509);
  EXPECT_EQ(a[1] + b[1], 11587);
  EXPECT_EQ(a[2] + b[2], 2573);
  EXPECT_EQ(a[3] + b[3], 8030);
  EXPECT_EQ(a, (Counts{6721, 10399, 2328, 7176}));
  EXPECT_EQ(b, (Counts{788, 1188, 245, 854}));
  EXPECT_EQ(train.count, 26624);
  EXPECT_EQ(test.count, 3075);
  EXPECT_EQ(train.tokens.size(), size_t{26624 * 64});
  std::string first = t.decode(std::span<const int32_t>(train.tokens.data(), 64));
  EXPECT_TRUE(first.starts_with("Animalia: taxonomic kingdom")) << first;
}

}  // namespace
}  // namespace ls::data
