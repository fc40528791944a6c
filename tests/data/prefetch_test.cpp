// Tests for ls::data::Prefetcher: the same batches as BatchIterator, bitwise, over several epochs
// for each depth and drop_last; seek (resume) mid-epoch and at an epoch's end; producer
// exceptions re-thrown in order; destruction at any point without hanging; bad arguments.
#include <lockstep/data/prefetch.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/data/text_test_util.h"

namespace ls::data {
namespace {

using testing::contains;
using testing::error_of;

// count examples of `features` tokens: token j of example i = i * 100 + j; labels = -i or so.
Dataset token_dataset(int64_t count, int64_t features) {
  Dataset ds;
  ds.name = "seq";
  ds.count = count;
  ds.features = features;
  ds.classes = 1000;
  ds.label_width = 2;
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t j = 0; j < features; ++j) ds.tokens.push_back(static_cast<int32_t>(i * 100 + j));
    ds.labels.push_back(static_cast<int32_t>(i));
    ds.labels.push_back(static_cast<int32_t>(i % 3 == 0 ? -100 : i + 1));
  }
  return ds;
}

PrefetchOptions with_depth(int depth) {
  PrefetchOptions options;
  options.depth = depth;
  return options;
}

// One step of a sequence: the batch, or an end-of-epoch marker (an empty Batch).
std::vector<Batch> reference(const Dataset& ds, uint64_t seed, int64_t batch, bool drop_last,
                             int epochs, int64_t start_epoch = 0, int64_t start_index = 0) {
  Sampler sampler(ds.count, seed);
  BatchIterator it(ds, sampler, batch, drop_last);
  it.seek(start_epoch, start_index);
  std::vector<Batch> out;
  for (int e = 0; e < epochs; ++e) {
    Batch b;
    while (it.next(b)) out.push_back(b);
    out.push_back(Batch{});
    sampler.set_epoch(sampler.epoch() + 1);
    it.reset();
  }
  return out;
}

std::vector<Batch> prefetched(Prefetcher& p, int epochs) {
  std::vector<Batch> out;
  for (int e = 0; e < epochs; ++e) {
    Batch b;
    while (p.next(b)) out.push_back(b);
    out.push_back(Batch{});
  }
  return out;
}

void expect_same(const std::vector<Batch>& got, const std::vector<Batch>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].size, want[i].size) << "step " << i;
    EXPECT_EQ(got[i].features, want[i].features) << "step " << i;
    EXPECT_EQ(got[i].label_width, want[i].label_width) << "step " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "step " << i;
    EXPECT_EQ(got[i].images, want[i].images) << "step " << i;
    EXPECT_EQ(got[i].labels, want[i].labels) << "step " << i;
  }
}

TEST(PrefetcherTest, SameBatchesAsBatchIterator) {
  Dataset ds = token_dataset(23, 5);
  for (bool drop_last : {true, false}) {
    for (int depth : {1, 2, 5}) {
      SCOPED_TRACE("drop_last " + std::to_string(drop_last) + " depth " + std::to_string(depth));
      Sampler sampler(ds.count, 11);
      Prefetcher p(ds, sampler, 4, drop_last, with_depth(depth));
      EXPECT_EQ(p.batches_per_epoch(), drop_last ? 5 : 6);
      EXPECT_EQ(p.epoch(), 0);
      expect_same(prefetched(p, 3), reference(ds, 11, 4, drop_last, 3));
      EXPECT_EQ(p.epoch(), 3);
      EXPECT_EQ(p.position(), 0);
    }
  }
}

TEST(PrefetcherTest, ImagesToo) {
  Dataset ds;
  ds.name = "img";
  ds.count = 7;
  ds.features = 3;
  ds.classes = 7;
  for (int i = 0; i < 21; ++i) ds.images.push_back(static_cast<float>(i) * 0.5f);
  for (int i = 0; i < 7; ++i) ds.labels.push_back(i);
  Sampler sampler(ds.count, 5);
  Prefetcher p(ds, sampler, 2, false);
  expect_same(prefetched(p, 2), reference(ds, 5, 2, false, 2));
}

TEST(PrefetcherTest, SeekResumesLikeBatchIterator) {
  Dataset ds = token_dataset(20, 3);
  Sampler sampler(ds.count, 3);
  Prefetcher p(ds, sampler, 3);  // 6 batches per epoch
  Batch b;
  ASSERT_TRUE(p.next(b));
  p.seek(2, 4);
  EXPECT_EQ(p.epoch(), 2);
  EXPECT_EQ(p.position(), 4);
  expect_same(prefetched(p, 2), reference(ds, 3, 3, true, 2, 2, 4));
  p.seek(1, 6);  // a checkpoint saved at the end of epoch 1
  EXPECT_FALSE(p.next(b));
  EXPECT_EQ(p.epoch(), 2);
  p.seek(0, 0);
  expect_same(prefetched(p, 1), reference(ds, 3, 3, true, 1));
  // position() after k batches is the index to resume at.
  ASSERT_TRUE(p.next(b));
  ASSERT_TRUE(p.next(b));
  int64_t epoch = p.epoch(), index = p.position();
  std::vector<Batch> rest = prefetched(p, 1);
  Sampler sampler2(ds.count, 3);
  Prefetcher q(ds, sampler2, 3);
  q.seek(epoch, index);
  expect_same(prefetched(q, 1), rest);
}

TEST(PrefetcherTest, ProducerExceptionIsRethrownInOrder) {
  Dataset ds = token_dataset(12, 2);
  Sampler sampler(ds.count, 1);
  PrefetchOptions options;
  options.on_produce = [](int64_t epoch, int64_t index) {
    if (epoch == 0 && index == 2) throw std::runtime_error("disk went away");
  };
  Prefetcher p(ds, sampler, 3, true, options);
  std::vector<Batch> want = reference(ds, 1, 3, true, 2);
  Batch b;
  ASSERT_TRUE(p.next(b));
  EXPECT_EQ(b.tokens, want[0].tokens);
  ASSERT_TRUE(p.next(b));
  EXPECT_EQ(b.tokens, want[1].tokens);
  EXPECT_THROW(p.next(b), std::runtime_error);
  EXPECT_THROW(p.next(b), std::runtime_error);  // sticky until seek
  p.seek(1, 0);
  std::vector<Batch> epoch1(want.begin() + 5, want.end());
  expect_same(prefetched(p, 1), epoch1);
}

TEST(PrefetcherTest, GatherErrorsReachTheConsumer) {
  Dataset ds = token_dataset(6, 2);
  Sampler sampler(ds.count, 1);
  PrefetchOptions options;
  options.on_produce = [](int64_t, int64_t index) {
    if (index == 1) throw Error("bad batch", __FILE__, __LINE__);
  };
  Prefetcher p(ds, sampler, 2, true, options);
  Batch b;
  ASSERT_TRUE(p.next(b));
  EXPECT_TRUE(contains(error_of([&] { p.next(b); }), "bad batch"));
}

TEST(PrefetcherTest, DestroysCleanlyAtAnyPoint) {
  Dataset ds = token_dataset(50, 4);
  for (int consumed : {0, 1, 3, 30}) {
    Sampler sampler(ds.count, 9);
    std::atomic<int> produced{0};
    PrefetchOptions options;
    options.on_produce = [&](int64_t, int64_t) {
      ++produced;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    auto start = std::chrono::steady_clock::now();
    {
      Prefetcher p(ds, sampler, 5, true, options);
      Batch b;
      for (int i = 0; i < consumed; ++i) p.next(b);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
    EXPECT_LE(produced.load(), consumed + consumed / 10 + 3) << "depth 2 bounds the look-ahead";
  }
}

TEST(PrefetcherTest, ReadyBatchesDoNotWait) {
  Dataset ds = token_dataset(40, 4);
  Sampler sampler(ds.count, 2);
  Prefetcher p(ds, sampler, 4, true, with_depth(3));
  Batch b;
  ASSERT_TRUE(p.next(b));
  // The producer fills the queue (bounded: a stuck producer fails the test, never hangs it).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (p.ready() < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(p.ready(), 3);
  int64_t before = p.waits();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(p.next(b));
  EXPECT_EQ(p.waits(), before);
}

TEST(PrefetcherTest, BadArguments) {
  Dataset ds = token_dataset(10, 2);
  Sampler sampler(ds.count, 1);
  EXPECT_TRUE(
      contains(error_of([&] { Prefetcher p(ds, sampler, 2, true, with_depth(0)); }), "depth is 0"));
  EXPECT_TRUE(contains(error_of([&] { Prefetcher p(ds, sampler, 11); }), "batch_size 11 exceeds"));
  Sampler wrong(9, 1);
  EXPECT_TRUE(contains(error_of([&] { Prefetcher p(ds, wrong, 2); }), "sampler covers 9"));
  Prefetcher p(ds, sampler, 2);
  EXPECT_TRUE(contains(error_of([&] { p.seek(0, 6); }), "batch index 6 is outside 0..5"));
  EXPECT_TRUE(contains(error_of([&] { p.seek(-1, 0); }), "epoch is -1"));
  Batch b;
  EXPECT_TRUE(p.next(b));  // still usable
}

}  // namespace
}  // namespace ls::data
