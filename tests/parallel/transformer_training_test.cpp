// Transformers trained through DataParallel on host devices: 1, 2 and 4 replicas agree on the
// same global batch with dropout on (its masks follow the global example, not the replica),
// padded language-model targets count for nothing, uneven shards still give the global mean,
// and a resumed run is bitwise the uninterrupted one.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <lockstep/error.h>
#include <lockstep/data/sampler.h>
#include "ops/softmax_xent.h"
#include <lockstep/data_parallel.h>

namespace ls {
namespace {

constexpr int64_t kSeq = 8;

std::vector<Device> hosts(int n) { return parse_devices("host:" + std::to_string(n)); }

nn::TransformerConfig tiny_config(bool classifier) {
  nn::TransformerConfig c =
      classifier ? nn::bert_config(2, 2, 16, kSeq, 20) : nn::gpt_config(2, 2, 16, kSeq, 20);
  c.ffn = 24;
  c.pad_id = 0;
  c.dropout = 0.1f;
  if (classifier) c.classes = 3;
  return c;
}

// A batch of random sequences; language-model labels are the next tokens (the last one and
// those of padding ignored), classifier labels one class per sequence. Sequences get random
// lengths >= 2, right-padded with token 0.
data::Batch token_batch(int64_t size, bool classifier, uint32_t seed) {
  std::mt19937 rng(seed);
  data::Batch b;
  b.size = size;
  b.features = kSeq;
  b.label_width = classifier ? 1 : kSeq;
  for (int64_t r = 0; r < size; ++r) {
    const int64_t length = 2 + static_cast<int64_t>(rng() % (kSeq - 1));
    for (int64_t t = 0; t < kSeq; ++t) {
      b.tokens.push_back(t < length ? 1 + static_cast<int32_t>(rng() % 19) : 0);
    }
    if (classifier) {
      b.labels.push_back(static_cast<int32_t>(rng() % 3));
      continue;
    }
    for (int64_t t = 0; t < kSeq; ++t) {
      const bool has_next = t + 1 < length;
      b.labels.push_back(has_next ? b.tokens[static_cast<size_t>(r * kSeq + t + 1)] : kIgnoreLabel);
    }
  }
  return b;
}

OptimizerFactory sgd() { return make_optimizer_factory({"sgd", 0.1f, 0.9f, 1e-4f}); }

struct TrainRun {
  std::vector<float> losses;
  std::vector<float> parameters;
};

// AdamW, whose update g / sqrt(v) turns last-bit differences of near-zero gradients into
// lr-sized steps, would make parameters of different summation orders drift apart; SGD with
// momentum keeps them comparable (as the MLP's equivalence test does).
TrainRun train(int devices, bool classifier, int steps, int64_t global,
               DataParallelOptions options = {}) {
  DataParallel dp(hosts(devices), transformer_factory(tiny_config(classifier)), sgd(), options);
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    run.losses.push_back(
        dp.step(token_batch(global, classifier, 100 + static_cast<uint32_t>(s))).loss);
  }
  run.parameters = dp.parameters(0);
  return run;
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double scale = std::max(1e-3, static_cast<double>(std::abs(a[i])));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

void check_replicas_agree(bool classifier) {
  const TrainRun one = train(1, classifier, 20, 8);
  for (int n : {2, 4}) {
    const TrainRun many = train(n, classifier, 20, 8);
    EXPECT_LT(max_relative_difference(one.losses, many.losses), 1e-5) << n << " replicas";
    EXPECT_LT(max_relative_difference(one.parameters, many.parameters), 1e-3) << n << " replicas";
  }
}

TEST(TransformerTraining, GptOnTwoAndFourReplicasMatchesOneWithDropout) {
  check_replicas_agree(false);
}

TEST(TransformerTraining, ClassifierOnTwoAndFourReplicasMatchesOneWithDropout) {
  check_replicas_agree(true);
}

TEST(TransformerTraining, UnevenShardsOfPaddedSequencesGiveTheGlobalMean) {
  DataParallelOptions uneven;
  uneven.allow_uneven_shards = true;
  const TrainRun one = train(1, false, 5, 7);
  const TrainRun three = train(3, false, 5, 7, uneven);
  EXPECT_LT(max_relative_difference(one.losses, three.losses), 1e-5);
}

TEST(TransformerTraining, SameRunTwiceIsBitwiseEqual) {
  const TrainRun a = train(2, false, 5, 8), b = train(2, false, 5, 8);
  EXPECT_EQ(a.parameters, b.parameters);
  EXPECT_EQ(a.losses, b.losses);
}

TEST(TransformerTraining, ResumedRunIsBitwiseTheUninterruptedOne) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("lockstep-transformer-resume-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  const TrainRun straight = train(2, false, 6, 8);
  {
    DataParallel dp(hosts(2), transformer_factory(tiny_config(false)), sgd());
    for (int s = 0; s < 3; ++s) dp.step(token_batch(8, false, 100 + static_cast<uint32_t>(s)));
    dp.save(dir);
  }
  DataParallel dp(hosts(2), transformer_factory(tiny_config(false)), sgd());
  dp.load(dir);
  for (int s = 3; s < 6; ++s) dp.step(token_batch(8, false, 100 + static_cast<uint32_t>(s)));
  EXPECT_EQ(dp.parameters(0), straight.parameters);
  std::filesystem::remove_all(dir);
}

TEST(TransformerTraining, BatchesWithoutLossOrOfTheWrongKindAreClearErrors) {
  DataParallel dp(hosts(1), transformer_factory(tiny_config(false)), make_optimizer_factory({}));
  data::Batch all_ignored = token_batch(2, false, 1);
  std::fill(all_ignored.labels.begin(), all_ignored.labels.end(), kIgnoreLabel);
  EXPECT_THROW(dp.step(all_ignored), Error);
  data::Batch short_labels = token_batch(2, false, 1);
  short_labels.labels.pop_back();
  try {
    dp.step(short_labels);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed batch"), std::string::npos);
  }
}

}  // namespace
}  // namespace ls
