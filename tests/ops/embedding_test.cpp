// embedding and embedding_backward against plain references: the lookup exactly, the gradient
// bitwise equal to one sequential loop (contributions in increasing i) whatever the split over
// columns, and against central differences; out-of-range ids surfacing at synchronize() with the
// message of a bad label; argument errors.
#include "ops/embedding.h"

#include <gtest/gtest.h>

#include <array>

#include "ops/host/host_ops.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

// dtable[ids[i], :] += dy[i, :] in f32, i in order: what the kernel must match bitwise.
std::vector<float> sequential_backward(std::vector<float> dtable, const std::vector<float>& dy,
                                       const std::vector<int32_t>& ids, int64_t dim) {
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < dim; ++c) dtable[ids[i] * dim + c] += dy[i * dim + c];
  }
  return dtable;
}

class EmbeddingTest : public OpTestBase {};

TEST_F(EmbeddingTest, LookupCopiesRows) {
  for (auto [vocab, dim, n] :
       std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {11, 5, 14}, {50, 64, 300}, {7, 300, 2000}}) {
    const auto table = random_vector(vocab * dim, 1);
    const auto ids = random_labels(n, static_cast<int32_t>(vocab), 2);
    Tensor out = Tensor::empty({n, dim}, DType::kF32, dev_);
    embedding(upload(table, {vocab, dim}), upload_i32(ids, {n}), out, *stream_);
    std::vector<double> want(n * dim);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < dim; ++c) want[i * dim + c] = table[ids[i] * dim + c];
    }
    EXPECT_TRUE(all_close(download(out), want, 0, 0)) << vocab << "x" << dim << " n=" << n;
  }
}

TEST_F(EmbeddingTest, IdsOfAnyShape) {
  const auto table = random_vector(6 * 3, 3);
  Tensor out = Tensor::empty({4, 3}, DType::kF32, dev_);
  embedding(upload(table, {6, 3}), upload_i32({5, 0, 2, 5}, {2, 2}), out, *stream_);
  const auto got = download(out);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(got[c], table[15 + c]);
    EXPECT_EQ(got[9 + c], table[15 + c]);
    EXPECT_EQ(got[6 + c], table[6 + c]);
  }
}

// Many repeated ids; dims that split into several column chunks on the host.
TEST_F(EmbeddingTest, GradientIsTheSequentialSumBitwise) {
  for (auto [vocab, dim, n] : std::vector<std::array<int64_t, 3>>{
           {1, 1, 1}, {3, 5, 40}, {11, 7, 100}, {20, 300, 1000}, {5, 1000, kHostGrain + 3}}) {
    const auto dtable0 = random_vector(vocab * dim, 4);
    const auto dy = random_vector(n * dim, 5, -10, 10);
    const auto ids = random_labels(n, static_cast<int32_t>(vocab), 6);
    Tensor dtable = upload(dtable0, {vocab, dim});
    embedding_backward(upload(dy, {n, dim}), upload_i32(ids, {n}), dtable, *stream_);
    const auto want = sequential_backward(dtable0, dy, ids, dim);
    EXPECT_TRUE(bitwise_equal(download(dtable), want)) << vocab << "x" << dim << " n=" << n;
    // And close to the exact sum.
    std::vector<double> exact = to_double(dtable0);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < dim; ++c) exact[ids[i] * dim + c] += dy[i * dim + c];
    }
    EXPECT_TRUE(all_close(download(dtable), exact, 1e-4, 1e-3));
  }
}

// L = sum(w . embedding(table, ids)): dL/dtable from the backward vs central differences.
TEST_F(EmbeddingTest, GradientMatchesFiniteDifferences) {
  const int64_t vocab = 5, dim = 3, n = 8;
  const auto table = random_vector(vocab * dim, 7);
  const auto w = random_vector(n * dim, 8);
  Tensor ids = upload_i32({0, 3, 3, 1, 4, 0, 3, 1}, {n});
  Tensor out = Tensor::empty({n, dim}, DType::kF32, dev_);
  auto loss = [&](const std::vector<float>& tv) {
    embedding(upload(tv, {vocab, dim}), ids, out, *stream_);
    return dot(download(out), w);
  };
  Tensor dtable = upload(std::vector<float>(vocab * dim, 0.0f), {vocab, dim});
  embedding_backward(upload(w, {n, dim}), ids, dtable, *stream_);
  EXPECT_TRUE(all_close(download(dtable), fd_gradient(loss, table, 1e-2f), 1e-3, 1e-4));
}

TEST_F(EmbeddingTest, IdOutOfRangeFailsAtSynchronize) {
  Tensor table = upload(random_vector(4 * 3, 9), {4, 3});
  Tensor out = Tensor::empty({3, 3}, DType::kF32, dev_);
  embedding(table, upload_i32({0, 1, 4}, {3}), out, *stream_);  // the call itself succeeds
  std::string msg = error_of([&] { stream_->synchronize(); });
  EXPECT_TRUE(contains(msg, "embedding: id 4 in row 2 is outside [0, 4)")) << msg;
  EXPECT_TRUE(contains(msg, kEmbeddingIdHint));

  Tensor dtable = upload(std::vector<float>(12, 0.0f), {4, 3});
  embedding_backward(upload(random_vector(9, 10), {3, 3}), upload_i32({-1, 1, 2}, {3}), dtable,
                     *stream_);
  msg = error_of([&] { stream_->synchronize(); });
  EXPECT_TRUE(contains(msg, "embedding_backward: id -1 in row 0 is outside [0, 4)")) << msg;

  // Reported once; the stream works again.
  embedding(table, upload_i32({3, 2, 1}, {3}), out, *stream_);
  EXPECT_EQ(error_of([&] { stream_->synchronize(); }), "<no error>");
}

TEST_F(EmbeddingTest, ArgumentErrors) {
  Tensor table = Tensor::empty({4, 3}, DType::kF32, dev_);
  Tensor ids = upload_i32({0, 1}, {2});
  Tensor out = Tensor::empty({2, 3}, DType::kF32, dev_);
  std::string msg = error_of([&] { embedding(table, upload({0, 1}, {2}), out, *stream_); });
  EXPECT_TRUE(contains(msg, "embedding: ids is f32[2]"));
  EXPECT_TRUE(contains(msg, "expected dtype i32"));
  msg = error_of([&] { embedding(table.reshape({12}), ids, out, *stream_); });
  EXPECT_TRUE(contains(msg, "table is f32[12]"));
  EXPECT_TRUE(contains(msg, "2-D [vocab, dim]"));
  msg = error_of([&] {
    embedding(table, ids, Tensor::empty({2, 4}, DType::kF32, dev_), *stream_);
  });
  EXPECT_TRUE(contains(msg, "embedding: out is f32[2, 4]"));
  EXPECT_TRUE(contains(msg, "expected [2, 3]"));
  msg = error_of([&] { embedding_backward(out, ids, Tensor(), *stream_); });
  EXPECT_TRUE(contains(msg, "embedding_backward: dtable is an undefined Tensor"));
  Tensor both = Tensor::empty({18}, DType::kF32, dev_);
  msg = error_of([&] {
    embedding_backward(both.view(6, {2, 3}), ids, both.view(0, {4, 3}), *stream_);
  });
  EXPECT_TRUE(contains(msg, "share memory"));
}

}  // namespace
}  // namespace ls::test
