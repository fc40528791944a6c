// Tests for ls::data text_corpus: GCIDE cleaning on the hand-made fixture (exact output), the
// dictzip reader's errors, and, when dict-gcide is installed, the real dictionary; packing text
// into next-token examples (exact tokens and labels) and the tail split.
#include <lockstep/data/text_corpus.h>

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
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
using Ids = std::vector<int32_t>;

const char* const kSampleClean =
    "Affear, v. t. [L. ad + fatuus foolish.] To frighten. [Obs.] --Spenser.\n"
    "Affect, v. t. [imp. & p. p. Affected; AS. afaeran.] 1. To act upon; to produce an effect or "
    "change upon. As might affect the earth with cold heat. --Milton. Protozoa, including "
    "Infusoria. See cafe and alpha rays.\n"
    "Anime, a. (Her.) Of a different tincture.\n";

TEST(GcideTest, CleansTheFixtureExactly) {
  std::string raw = read_text_file(fixture("gcide_sample.txt"), "fixture");
  EXPECT_EQ(clean_gcide_text(raw), kSampleClean);
  EXPECT_EQ(clean_gcide_text(""), "");
  EXPECT_EQ(clean_gcide_text("no entries here\n   at all\n"), "");
}

TEST(GcideTest, EntitiesAndTags) {
  EXPECT_EQ(clean_gcide_text("X \\x\\ [i^]t [\"o] [imac] [thorn] [Delta] [.] [root]2\n"),
            "X it o i th Delta [.] root2\n");
  EXPECT_EQ(clean_gcide_text("X \\x\\ a<i>b</i>c <not a tag [RHUD]\n"), "X abc <not a tag\n");
  EXPECT_EQ(clean_gcide_text("X \\x\\ caf\xc3\xa9\tend\\ dangling\n"), "X caf end\n");
}

class GcideFileTest : public testing::TempDirTest {
 protected:
  std::string write_gzip(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    EXPECT_EQ(gzclose(f), Z_OK);
    return path;
  }
};

TEST_F(GcideFileTest, ReadsGzipAndPlain) {
  std::string raw = read_text_file(fixture("gcide_sample.txt"), "fixture");
  EXPECT_EQ(load_gcide_text(write_gzip("g.dict.dz", raw)), kSampleClean);
  EXPECT_EQ(load_gcide_text(fixture("gcide_sample.txt")), kSampleClean);  // zlib reads plain too
}

TEST_F(GcideFileTest, ErrorsNameTheFile) {
  EXPECT_TRUE(contains(error_of([&] { load_gcide_text((dir_ / "none.dz").string()); }),
                       "GCIDE dictionary '" + (dir_ / "none.dz").string() + "' not found"));
  EXPECT_TRUE(contains(error_of([&] { load_gcide_text(dir_.string()); }), "not a regular file"));
  std::string raw = read_text_file(fixture("gcide_sample.txt"), "fixture");
  std::string gz = read_text_file(write_gzip("full.dz", raw + raw + raw), "gz");
  std::string cut = write("cut.dz", gz.substr(0, gz.size() / 2));
  EXPECT_TRUE(contains(error_of([&] { load_gcide_text(cut); }), "corrupt or truncated"));
  std::string empty = write_gzip("empty.dz", "00-database-url\n   nothing\n");
  EXPECT_TRUE(contains(error_of([&] { load_gcide_text(empty); }), "no dictionary entry found"));
}

TEST(GcideTest, RealDictionaryIfInstalled) {
  if (!std::filesystem::exists(kGcidePath)) GTEST_SKIP() << kGcidePath << " (dict-gcide) absent";
  std::string text = load_gcide_text();
  EXPECT_GT(text.size(), size_t{25'000'000});
  EXPECT_GT(std::count(text.begin(), text.end(), '\n'), 120'000);
  EXPECT_TRUE(text.starts_with("0 adj. 1. indicating the absence")) << text.substr(0, 80);
  EXPECT_EQ(text.find('\\'), std::string::npos);
  EXPECT_EQ(text.find('{'), std::string::npos);
  EXPECT_EQ(text.find("[1913 Webster]"), std::string::npos);
  EXPECT_EQ(text.find("\n\n"), std::string::npos);
  EXPECT_TRUE(std::all_of(text.begin(), text.end(),
                          [](char c) { return c == '\n' || (c >= ' ' && c <= '~'); }));
}

TEST(LmDatasetTest, PacksDocumentsWithEosAndNextTokenLabels) {
  ByteTokenizer t;
  Dataset ds = make_lm_dataset("ab\n\n\ncd\n", t, 2, "lm");
  EXPECT_EQ(ds.name, "lm");
  EXPECT_EQ(ds.count, 2);  // stream a b eos c d eos: (6 - 1) / 2
  EXPECT_EQ(ds.features, 2);
  EXPECT_EQ(ds.label_width, 2);
  EXPECT_EQ(ds.classes, 258);
  EXPECT_TRUE(ds.images.empty());
  EXPECT_EQ(ds.tokens, (Ids{97, 98, 257, 99}));
  EXPECT_EQ(ds.labels, (Ids{98, 257, 99, 100}));
  Dataset one = make_lm_dataset("ab\ncd", t, 5, "lm");
  EXPECT_EQ(one.tokens, (Ids{97, 98, 257, 99, 100}));
  EXPECT_EQ(one.labels, (Ids{98, 257, 99, 100, 257}));
  Dataset capped = make_lm_dataset("abcdefgh\nijkl\n", t, 2, "lm", 2);
  EXPECT_EQ(capped.count, 2);
  EXPECT_EQ(capped.tokens, (Ids{97, 98, 99, 100}));
  EXPECT_EQ(capped.labels, (Ids{98, 99, 100, 101}));
}

TEST(LmDatasetTest, Gpt2Tokens) {
  auto t = Gpt2BpeTokenizer::from_files(fixture("gpt2/vocab.json"), fixture("gpt2/merges.txt"));
  Dataset ds = make_lm_dataset("the world\n the", t, 3, "lm");
  EXPECT_EQ(ds.classes, 275);
  EXPECT_EQ(ds.count, 1);  // the world eos Ġthe eos: 6 tokens
  EXPECT_EQ(ds.tokens, (Ids{83, 257, 268}));
  EXPECT_EQ(ds.labels, (Ids{257, 268, 274}));
}

TEST(LmDatasetTest, BadArguments) {
  ByteTokenizer t;
  EXPECT_TRUE(contains(error_of([&] { make_lm_dataset("abc", t, 0, "x"); }), "seq_len is 0"));
  EXPECT_TRUE(
      contains(error_of([&] { make_lm_dataset("abc", t, 4, "x"); }), "encodes to 4 tokens"));
  EXPECT_TRUE(contains(error_of([&] { make_lm_dataset("\n\n", t, 1, "x"); }), "encodes to 0"));
  EXPECT_TRUE(
      contains(error_of([&] { make_lm_dataset("abc", t, 1, "x", -1); }), "max_examples is -1"));
}

TEST(SplitTailTest, HoldsOutTheTail) {
  Dataset ds = make_lm_dataset("abcdefghijklmnopqrstu", ByteTokenizer(), 2, "lm");
  ASSERT_EQ(ds.count, 10);
  DatasetSplit split = split_tail(ds, 0.2);
  EXPECT_EQ(split.train.name, "lm-train");
  EXPECT_EQ(split.validation.name, "lm-val");
  EXPECT_EQ(split.train.count, 8);
  EXPECT_EQ(split.validation.count, 2);
  EXPECT_EQ(split.validation.tokens, (Ids{'q', 'r', 's', 't'}));
  EXPECT_EQ(split.validation.labels, (Ids{'r', 's', 't', 'u'}));
  EXPECT_EQ(split.train.tokens.size(), 16u);
  EXPECT_EQ(split.train.labels.back(), 'q');
  EXPECT_EQ(split_tail(ds, 0.01).validation.count, 1);  // at least one

  Dataset images;
  images.name = "img";
  images.count = 4;
  images.features = 2;
  images.classes = 3;
  images.images = {0, 1, 2, 3, 4, 5, 6, 7};
  images.labels = {0, 1, 2, 0};
  DatasetSplit s = split_tail(images, 0.25);
  EXPECT_EQ(s.validation.images, (std::vector<float>{6, 7}));
  EXPECT_EQ(s.validation.labels, (Ids{0}));
  EXPECT_TRUE(s.validation.tokens.empty());
  EXPECT_EQ(s.train.images.size(), 6u);

  EXPECT_TRUE(contains(error_of([&] { split_tail(ds, 0.0); }), "fraction is 0"));
  EXPECT_TRUE(contains(error_of([&] { split_tail(ds, 1.0); }), "fraction is 1"));
  EXPECT_TRUE(contains(error_of([&] { split_tail(ds, 0.99); }), "leaves none to train on"));
}

}  // namespace
}  // namespace ls::data
