// Tests for ls::data::load_idx_pair and load_fashion_mnist: exact normalised values, shape,
// count and label checks, file discovery (.gz or plain) with its error message, and, when
// Debian's dataset-fashion-mnist is installed, the real train and test sets.
#include <lockstep/data/dataset.h>

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <lockstep/error.h>

namespace ls::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_file(const fs::path& path, const Bytes& bytes) {
  if (path.extension() == ".gz") {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
    return;
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

float normalised(uint8_t x) {
  return (static_cast<float>(x) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
}

class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ls_dataset_" + std::string(info->name()) + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const Bytes& bytes) {
    fs::path path = dir_ / name;
    write_file(path, bytes);
    return path.string();
  }

  // load_idx_pair must throw ls::Error whose message contains every word.
  static void expect_error(const std::string& images, const std::string& labels, int classes,
                           const std::vector<std::string>& words) {
    EXPECT_THROW(load_idx_pair(images, labels, classes), ls::Error);
    try {
      load_idx_pair(images, labels, classes);
    } catch (const ls::Error& e) {
      std::string message = e.what();
      for (const std::string& w : words) EXPECT_NE(message.find(w), std::string::npos) << message;
    }
  }

  fs::path dir_;
};

TEST_F(DatasetTest, LoadsPairWithExactNormalisedValues) {
  // 3 images of 2x2: pixel values chosen to include 0 and 255.
  Bytes pixels = {0, 255, 128, 73, 1, 2, 3, 4, 200, 100, 50, 25};
  std::string images = write("img.idx.gz", idx_bytes({3, 2, 2}, pixels));
  std::string labels = write("lbl.idx", idx_bytes({3}, {2, 0, 1}));
  Dataset ds = load_idx_pair(images, labels, 3);
  EXPECT_EQ(ds.count, 3);
  EXPECT_EQ(ds.features, 4);
  EXPECT_EQ(ds.classes, 3);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{2, 0, 1}));
  ASSERT_EQ(ds.images.size(), pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) EXPECT_EQ(ds.images[i], normalised(pixels[i])) << i;
  // Independent of the formula above: the Fashion-MNIST constants and the /255 scaling.
  EXPECT_FLOAT_EQ(ds.images[0], -0.2860f / 0.3530f);
  EXPECT_FLOAT_EQ(ds.images[1], (1.0f - 0.2860f) / 0.3530f);
  EXPECT_NEAR(ds.images[0], -0.81019830f, 1e-6);
  EXPECT_NEAR(ds.images[1], 2.02266289f, 1e-6);
}

TEST_F(DatasetTest, CountMismatchNamesBothFilesAndCounts) {
  std::string images = write("img.idx", idx_bytes({3, 1, 2}, Bytes(6, 9)));
  std::string labels = write("lbl.idx", idx_bytes({4}, {0, 1, 0, 1}));
  expect_error(images, labels, 2, {images, labels, "holds 3", "holds 4", "must agree"});
}

TEST_F(DatasetTest, LabelOutOfRangeNamesFirstBadIndexAndValue) {
  std::string images = write("img.idx", idx_bytes({4, 1, 1}, {1, 2, 3, 4}));
  std::string labels = write("lbl.idx", idx_bytes({4}, {0, 9, 10, 12}));
  expect_error(images, labels, 10, {labels, "index 2 is 10", "< 10"});
}

TEST_F(DatasetTest, EmptyDataSetIsAnError) {
  std::string images = write("img.idx", idx_bytes({0, 28, 28}, {}));
  std::string labels = write("lbl.idx", idx_bytes({0}, {}));
  expect_error(images, labels, 10, {images, labels, "0 examples", "empty"});
}

TEST_F(DatasetTest, WrongRanksAreErrors) {
  std::string images = write("img.idx", idx_bytes({2, 2}, {1, 2, 3, 4}));
  std::string labels = write("lbl.idx", idx_bytes({2}, {0, 1}));
  expect_error(images, labels, 2, {images, "has 2 dims but must have 3"});
  // Swapped arguments: the labels file is 1-D.
  std::string good_images = write("img3.idx", idx_bytes({2, 1, 2}, {1, 2, 3, 4}));
  expect_error(labels, good_images, 2, {labels, "has 1 dims but must have 3"});
  std::string labels2 = write("lbl2.idx", idx_bytes({2, 1}, {0, 1}));
  expect_error(good_images, labels2, 2, {labels2, "has 2 dims but must have 1"});
}

TEST_F(DatasetTest, BadFileErrorPropagatesWithPath) {
  std::string labels = write("lbl.idx", idx_bytes({2}, {0, 1}));
  std::string missing = (dir_ / "nope.idx").string();
  expect_error(missing, labels, 2, {missing, "not found"});
}

TEST_F(DatasetTest, FashionMnistFindsGzipAndPlainFiles) {
  // Train as .gz, test as plain: both spellings must be found.
  write("train-images-idx3-ubyte.gz", idx_bytes({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}));
  write("train-labels-idx1-ubyte.gz", idx_bytes({2}, {9, 0}));
  write("t10k-images-idx3-ubyte", idx_bytes({1, 2, 2}, {255, 255, 0, 0}));
  write("t10k-labels-idx1-ubyte", idx_bytes({1}, {5}));
  Dataset train = load_fashion_mnist(dir_.string(), Split::kTrain);
  EXPECT_EQ(train.name, "fashion-mnist/train");
  EXPECT_EQ(train.count, 2);
  EXPECT_EQ(train.classes, 10);
  EXPECT_EQ(train.labels, (std::vector<int32_t>{9, 0}));
  Dataset test = load_fashion_mnist(dir_.string(), Split::kTest);
  EXPECT_EQ(test.name, "fashion-mnist/test");
  EXPECT_EQ(test.count, 1);
  EXPECT_EQ(test.images[0], normalised(255));
}

TEST_F(DatasetTest, FashionMnistMissingFilesSaysWhatWasTried) {
  write("train-images-idx3-ubyte", idx_bytes({1, 1, 1}, {0}));
  try {
    load_fashion_mnist(dir_.string(), Split::kTrain);
    FAIL() << "expected ls::Error";
  } catch (const ls::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("train-labels-idx1-ubyte.gz"), std::string::npos) << message;
    EXPECT_NE(message.find("train-labels-idx1-ubyte "), std::string::npos) << message;
    EXPECT_EQ(message.find("train-images"), std::string::npos) << "was found: " << message;
    EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;
    EXPECT_NE(message.find(kFashionMnistDir), std::string::npos) << message;
  }
  try {
    load_fashion_mnist(dir_.string(), Split::kTest);
    FAIL() << "expected ls::Error";
  } catch (const ls::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << message;
    EXPECT_NE(message.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << message;
  }
}

TEST_F(DatasetTest, FashionMnistMissingDirectory) {
  std::string missing = (dir_ / "absent").string();
  EXPECT_THROW(load_fashion_mnist(missing, Split::kTrain), ls::Error);
  try {
    load_fashion_mnist(missing, Split::kTrain);
  } catch (const ls::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(missing), std::string::npos) << message;
    EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
    EXPECT_NE(message.find("dataset-fashion-mnist"), std::string::npos) << message;
  }
}

TEST(FashionMnistReal, LoadsInstalledTrainAndTestSets) {
  if (!fs::is_directory(kFashionMnistDir)) {
    GTEST_SKIP() << kFashionMnistDir << " absent (apt-get install dataset-fashion-mnist)";
  }
  Dataset train = load_fashion_mnist(kFashionMnistDir, Split::kTrain);
  Dataset test = load_fashion_mnist(kFashionMnistDir, Split::kTest);
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
  for (const Dataset* ds : {&train, &test}) {
    EXPECT_EQ(ds->features, 784);
    EXPECT_EQ(ds->classes, 10);
    ASSERT_EQ(ds->images.size(), static_cast<size_t>(ds->count * 784));
    ASSERT_EQ(ds->labels.size(), static_cast<size_t>(ds->count));
  }
  std::vector<int64_t> per_class(10, 0);
  for (int32_t label : train.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++per_class[static_cast<size_t>(label)];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[static_cast<size_t>(c)], 6000) << "class " << c;
  for (int32_t label : test.labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
  }
  // The standardisation constants are the training set's: mean ~0, std ~1 after normalising.
  double sum = 0, sum_sq = 0;
  for (float x : train.images) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  double n = static_cast<double>(train.images.size());
  double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 1.0, 0.01);
}

}  // namespace
}  // namespace ls::data
