// Tests for ls::data::Sampler, BatchIterator and gather_batch: determinism per (seed, epoch),
// permutations, a pinned order (catches any change to the shuffle algorithm), batch contents,
// drop_last, no reallocation after the first batch, seek/resume equivalence and argument errors.
#include <lockstep/data/sampler.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <lockstep/error.h>

namespace ls::data {
namespace {

std::vector<int64_t> to_vector(std::span<const int64_t> s) { return {s.begin(), s.end()}; }

bool is_permutation_of_range(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// count examples of `features` floats; example i holds i*1000 + j and label i % classes.
Dataset make_dataset(int64_t count, int64_t features, int classes = 7) {
  Dataset ds;
  ds.name = "synthetic";
  ds.count = count;
  ds.features = features;
  ds.classes = classes;
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < features; ++j) ds.images.push_back(static_cast<float>(i * 1000 + j));
    ds.labels.push_back(static_cast<int32_t>(i % classes));
  }
  return ds;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ls::Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplerTest, SameSeedAndEpochGiveSameOrder) {
  Sampler a(1000, 42), b(1000, 42);
  EXPECT_EQ(to_vector(a.order()), to_vector(b.order()));
  a.set_epoch(5);
  b.set_epoch(3);
  b.set_epoch(5);  // the order depends on (seed, epoch) only, not on the path to it
  EXPECT_EQ(to_vector(a.order()), to_vector(b.order()));
  EXPECT_EQ(a.epoch(), 5);
}

TEST(SamplerTest, EveryEpochIsADifferentPermutation) {
  Sampler s(1000, 7);
  std::vector<std::vector<int64_t>> orders;
  for (int64_t e = 0; e < 5; ++e) {
    s.set_epoch(e);
    orders.push_back(to_vector(s.order()));
    EXPECT_TRUE(is_permutation_of_range(orders.back())) << "epoch " << e;
  }
  for (size_t i = 0; i < orders.size(); ++i) {
    for (size_t j = i + 1; j < orders.size(); ++j) EXPECT_NE(orders[i], orders[j]) << i << " " << j;
  }
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(orders[0], identity);
}

TEST(SamplerTest, DifferentSeedsGiveDifferentOrders) {
  Sampler a(1000, 1), b(1000, 2);
  EXPECT_NE(to_vector(a.order()), to_vector(b.order()));
}

TEST(SamplerTest, OrderIsPinned) {
  // The order must not change between builds or standard libraries: checkpoints and
  // cross-machine runs depend on it. If this fails, the shuffle changed.
  Sampler s(10, 2024);
  std::vector<int64_t> first = to_vector(s.order());
  EXPECT_TRUE(is_permutation_of_range(first));
  EXPECT_EQ(first, (std::vector<int64_t>{5, 0, 7, 1, 6, 2, 4, 3, 9, 8}));
}

TEST(SamplerTest, NoShuffleIsIdentityEveryEpoch) {
  Sampler s(6, 9, /*shuffle=*/false);
  EXPECT_EQ(to_vector(s.order()), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  s.set_epoch(3);
  EXPECT_EQ(to_vector(s.order()), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(SamplerTest, SingleExample) {
  Sampler s(1, 3);
  EXPECT_EQ(to_vector(s.order()), (std::vector<int64_t>{0}));
}

TEST(SamplerTest, BadArguments) {
  EXPECT_THROW(Sampler(0, 1), ls::Error);
  EXPECT_NE(error_of([] { Sampler(-3, 1); }).find("count is -3"), std::string::npos);
  Sampler s(4, 1);
  EXPECT_NE(error_of([&] { s.set_epoch(-1); }).find("epoch is -1"), std::string::npos);
}

TEST(GatherBatchTest, CopiesTheIndexedExamples) {
  Dataset ds = make_dataset(5, 3);
  Batch batch;
  std::vector<int64_t> indices = {4, 0, 2, 2};
  gather_batch(ds, indices, batch);
  EXPECT_EQ(batch.size, 4);
  EXPECT_EQ(batch.labels, (std::vector<int32_t>{4, 0, 2, 2}));
  EXPECT_EQ(batch.images, (std::vector<float>{4000, 4001, 4002, 0, 1, 2, 2000, 2001, 2002,
                                              2000, 2001, 2002}));
  std::vector<int64_t> bad = {1, 5};
  std::string message = error_of([&] { gather_batch(ds, bad, batch); });
  EXPECT_NE(message.find("index 5"), std::string::npos) << message;
}

TEST(BatchIteratorTest, BatchesAreTheSamplersOrderGathered) {
  Dataset ds = make_dataset(23, 4);
  Sampler sampler(23, 11);
  BatchIterator it(ds, sampler, 5);
  EXPECT_EQ(it.batches_per_epoch(), 4);  // drop_last drops the last 3 examples
  Batch batch, expected;
  int64_t b = 0;
  while (it.next(batch)) {
    gather_batch(ds, sampler.order().subspan(static_cast<size_t>(b * 5), 5), expected);
    EXPECT_EQ(batch.size, 5);
    EXPECT_EQ(batch.images, expected.images) << "batch " << b;
    EXPECT_EQ(batch.labels, expected.labels) << "batch " << b;
    // Each label matches the image it came with (example i has first pixel i*1000).
    for (int64_t k = 0; k < batch.size; ++k) {
      int64_t i = static_cast<int64_t>(batch.images[static_cast<size_t>(k * 4)]) / 1000;
      EXPECT_EQ(batch.labels[static_cast<size_t>(k)], i % 7);
    }
    ++b;
    EXPECT_EQ(it.position(), b);
  }
  EXPECT_EQ(b, 4);
  EXPECT_FALSE(it.next(batch));  // stays at the end until reset
}

TEST(BatchIteratorTest, KeepLastYieldsPartialFinalBatchAndCoversEverything) {
  Dataset ds = make_dataset(23, 2);
  Sampler sampler(23, 11);
  BatchIterator it(ds, sampler, 5, /*drop_last=*/false);
  EXPECT_EQ(it.batches_per_epoch(), 5);
  Batch batch;
  std::vector<int64_t> seen;
  std::vector<int64_t> sizes;
  while (it.next(batch)) {
    sizes.push_back(batch.size);
    for (int64_t k = 0; k < batch.size; ++k) {
      seen.push_back(static_cast<int64_t>(batch.images[static_cast<size_t>(k * 2)]) / 1000);
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{5, 5, 5, 5, 3}));
  EXPECT_EQ(seen, to_vector(sampler.order()));
  // Without drop_last a batch larger than the data set is one partial batch.
  BatchIterator big(ds, sampler, 100, /*drop_last=*/false);
  EXPECT_EQ(big.batches_per_epoch(), 1);
}

TEST(BatchIteratorTest, NoReallocationAfterFirstBatch) {
  Dataset ds = make_dataset(50, 8);
  Sampler sampler(50, 3);
  BatchIterator it(ds, sampler, 7, /*drop_last=*/false);
  Batch batch;
  ASSERT_TRUE(it.next(batch));
  const float* images = batch.images.data();
  const int32_t* labels = batch.labels.data();
  for (int epoch = 0; epoch < 3; ++epoch) {
    while (it.next(batch)) {
      EXPECT_EQ(batch.images.data(), images);
      EXPECT_EQ(batch.labels.data(), labels);
    }
    sampler.set_epoch(sampler.epoch() + 1);
    it.reset();
  }
}

TEST(BatchIteratorTest, EpochsAdvanceThroughSampler) {
  Dataset ds = make_dataset(12, 1);
  Sampler sampler(12, 5);
  BatchIterator it(ds, sampler, 12);
  Batch e0, e1;
  ASSERT_TRUE(it.next(e0));
  ASSERT_FALSE(it.next(e1));
  sampler.set_epoch(1);
  it.reset();
  EXPECT_EQ(it.position(), 0);
  ASSERT_TRUE(it.next(e1));
  EXPECT_NE(e0.images, e1.images);  // a new permutation
}

// Runs `batches` batches from (epoch 0, batch 0), advancing epochs, and records every batch.
std::vector<Batch> run(Sampler& sampler, BatchIterator& it, int batches) {
  std::vector<Batch> out;
  Batch batch;
  while (static_cast<int>(out.size()) < batches) {
    if (!it.next(batch)) {
      sampler.set_epoch(sampler.epoch() + 1);
      it.reset();
      continue;
    }
    out.push_back(batch);
  }
  return out;
}

TEST(BatchIteratorTest, SeekResumesTheExactBatchSequence) {
  Dataset ds = make_dataset(30, 3);
  Sampler sampler(30, 99);
  BatchIterator it(ds, sampler, 4);  // 7 batches per epoch
  std::vector<Batch> original = run(sampler, it, 25);

  // "Checkpoint" after 10 batches: epoch 1, batch 3. Resume in a fresh sampler and iterator.
  Sampler resumed_sampler(30, 99);
  BatchIterator resumed(ds, resumed_sampler, 4);
  resumed.seek(1, 3);
  EXPECT_EQ(resumed_sampler.epoch(), 1);
  EXPECT_EQ(resumed.position(), 3);
  std::vector<Batch> rest = run(resumed_sampler, resumed, 15);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].images, original[10 + i].images) << "batch " << 10 + i;
    EXPECT_EQ(rest[i].labels, original[10 + i].labels) << "batch " << 10 + i;
  }

  // Seeking to the end of an epoch makes next() report the end.
  resumed.seek(2, resumed.batches_per_epoch());
  Batch batch;
  EXPECT_FALSE(resumed.next(batch));
}

TEST(BatchIteratorTest, BadArguments) {
  Dataset ds = make_dataset(10, 2);
  Sampler sampler(10, 1);
  std::string zero = error_of([&] { BatchIterator(ds, sampler, 0); });
  EXPECT_NE(zero.find("batch_size is 0"), std::string::npos) << zero;
  std::string big = error_of([&] { BatchIterator(ds, sampler, 11); });
  EXPECT_NE(big.find("batch_size 11 exceeds the 10 examples"), std::string::npos) << big;
  EXPECT_NE(big.find("drop_last"), std::string::npos) << big;
  Sampler wrong(9, 1);
  std::string mismatch = error_of([&] { BatchIterator(ds, wrong, 2); });
  EXPECT_NE(mismatch.find("covers 9"), std::string::npos) << mismatch;
  BatchIterator it(ds, sampler, 3);
  std::string seek = error_of([&] { it.seek(0, 4); });
  EXPECT_NE(seek.find("batch index 4"), std::string::npos) << seek;
  EXPECT_THROW(it.seek(0, -1), ls::Error);
  EXPECT_THROW(it.seek(-1, 0), ls::Error);
}

}  // namespace
}  // namespace ls::data
