// Pipeline checkpoints on host devices: the same files as DataParallel's, so a GPT (tied head)
// trained on a 2-stage pipeline resumes on one device, and on 4 stages, as if never stopped
// (relative 1e-5: a pipeline sums micro-batches and the tied gradient in another order), a
// DataParallel checkpoint resumes on a pipeline, and loading then saving rewrites the tensors
// byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include <lockstep/error.h>
#include <lockstep/transformer_config.h>
#include <lockstep/pipeline.h>
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::max_relative_difference;
OptimizerFactory sgd() { return testing::momentum_sgd(); }
ModelFactory tiny_gpt() { return transformer_factory(testing::tiny_gpt_config()); }

data::Batch token_batch(int step) {
  std::mt19937 rng(static_cast<uint32_t>(70 + step));
  data::Batch b;
  b.size = 8;
  b.features = 8;
  b.label_width = 8;
  for (int i = 0; i < 64; ++i) b.tokens.push_back(static_cast<int32_t>(rng() % 19) + 1);
  for (int i = 0; i < 64; ++i) b.labels.push_back(static_cast<int32_t>(rng() % 20));
  return b;
}

PipelineOptions stages(int p) {
  PipelineOptions o;
  o.stages = p;
  o.micro_batches = 2;
  return o;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class PipelineCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("lockstep-pipe-ckpt-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(PipelineCheckpoint, APipelineRunResumesOnOneDeviceAndOnFourStages) {
  DataParallel straight(hosts(1), tiny_gpt(), sgd());
  for (int s = 0; s < 6; ++s) straight.step(token_batch(s));
  {
    Pipeline pipe(hosts(2), tiny_gpt(), sgd(), stages(2));
    for (int s = 0; s < 3; ++s) pipe.step(token_batch(s));
    pipe.save(at("pipe"), {0, 3});
  }
  DataParallel one(hosts(1), tiny_gpt(), sgd());
  EXPECT_EQ(one.load(at("pipe")).batch_index, 3);
  EXPECT_EQ(one.steps_taken(), 3);
  Pipeline four(hosts(4), tiny_gpt(), sgd(), stages(4));
  four.load(at("pipe"));
  for (int s = 3; s < 6; ++s) {
    one.step(token_batch(s));
    four.step(token_batch(s));
  }
  EXPECT_LT(max_relative_difference(straight.named_parameters(0), one.named_parameters(0)), 1e-5);
  EXPECT_LT(max_relative_difference(straight.named_parameters(0), four.named_parameters()), 1e-5);
}

TEST_F(PipelineCheckpoint, ADataParallelCheckpointResumesOnAPipeline) {
  DataParallel straight(hosts(2), tiny_gpt(), sgd());
  for (int s = 0; s < 6; ++s) straight.step(token_batch(s));
  {
    DataParallel dp(hosts(2), tiny_gpt(), sgd());
    for (int s = 0; s < 3; ++s) dp.step(token_batch(s));
    dp.save(at("dp"));
  }
  Pipeline pipe(hosts(2), tiny_gpt(), sgd(), stages(2));
  pipe.load(at("dp"));
  EXPECT_EQ(pipe.steps_taken(), 3);
  for (int s = 3; s < 6; ++s) pipe.step(token_batch(s));
  EXPECT_LT(max_relative_difference(straight.named_parameters(0), pipe.named_parameters()), 1e-5);
}

TEST_F(PipelineCheckpoint, LoadingThenSavingRewritesTheTensorsByteForByte) {
  const OptimizerFactory adamw = make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f});
  std::string saved;
  {
    DataParallel dp(hosts(1), tiny_gpt(), adamw);
    for (int s = 0; s < 2; ++s) dp.step(token_batch(s));
    saved = dp.save(at("dp"));
  }
  Pipeline pipe(hosts(4), tiny_gpt(), adamw, stages(4));  // the tied weight on stages 0 and 3
  pipe.load(at("dp"));
  const std::string again = pipe.save(at("pipe"));
  for (const char* file : {"/model.safetensors", "/optimizer.safetensors"}) {
    EXPECT_EQ(file_bytes(again + file), file_bytes(saved + file)) << file;
  }
  Pipeline wrong(hosts(2), tiny_gpt(), sgd(), stages(2));
  try {
    wrong.load(at("dp"));
    ADD_FAILURE() << "an AdamW checkpoint loaded into an SGD run";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("saved with optimizer 'adamw' but this run uses 'sgd'"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace ls
