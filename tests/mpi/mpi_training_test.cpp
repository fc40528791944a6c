// DataParallel across processes (lockstep/world.h): training, evaluation and checkpoints in this
// world shape against one process driving as many host devices, and failures in process 1
// ending every process with the original error. Runs in every shape tests/CMakeLists.txt
// registers (1 process x 2 devices; 2 and 3 processes x 1, 2 and 1,2 devices).
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "mpi/mpi_test_main.h"
#include <lockstep/data_parallel.h>
#include "parallel/fault_injection.h"
#include "parallel/mpi/mpi_runtime.h"
#include <lockstep/pipeline.h>
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls::mpi_test {
namespace {

using Clock = std::chrono::steady_clock;
using testing::Fault;

void barrier() {
  if (World::current().uses_mpi()) MPI_Barrier(MPI_COMM_WORLD);
}

// Language-model batches of the tiny GPT (tests/parallel/training_helpers.h): random sequences
// of 4..8 tokens from 1..19, padded with 0; labels are the next tokens, ignored past the end.
data::Batch token_batch(int64_t size, uint32_t seed) {
  const nn::TransformerConfig config = testing::tiny_gpt_config();
  const int64_t seq = config.max_seq;
  std::mt19937 rng(seed);
  data::Batch b;
  b.size = size;
  b.features = seq;
  b.label_width = seq;
  for (int64_t r = 0; r < size; ++r) {
    const int64_t length = 4 + static_cast<int64_t>(rng() % 5);
    for (int64_t t = 0; t < seq; ++t) {
      b.tokens.push_back(t < length ? 1 + static_cast<int32_t>(rng() % 19) : 0);
    }
    for (int64_t t = 0; t < seq; ++t) {
      b.labels.push_back(t + 1 < length ? b.tokens[static_cast<size_t>(r * seq + t + 1)]
                                        : data::kIgnoreLabel);
    }
  }
  return b;
}

// A batch's rows as a data set (for evaluate).
data::Dataset dataset_of(const data::Batch& rows) {
  data::Dataset dataset;
  dataset.name = "tokens";
  dataset.count = rows.size;
  dataset.features = rows.features;
  dataset.label_width = rows.label_width;
  dataset.classes = testing::tiny_gpt_config().vocab;
  dataset.tokens = rows.tokens;
  dataset.labels = rows.labels;
  return dataset;
}

// 24 rows: divides by every replica count the registered shapes give (2, 3, 4, 6).
constexpr int64_t kBatch = 24;

struct Trained {
  std::vector<float> losses;
  std::vector<float> parameters;  // local replica 0's
};

Trained train(DataParallel& dp, int steps) {
  Trained run;
  for (int s = 0; s < steps; ++s) {
    run.losses.push_back(dp.step(token_batch(kBatch, 100 + static_cast<uint32_t>(s))).loss);
  }
  run.parameters = dp.parameters(0);
  return run;
}

DataParallel world_run(ShardMode shard = ShardMode::kNone, OptimizerFactory optimizer = {}) {
  DataParallelOptions options;
  options.shard = shard;
  return DataParallel(World::current(), transformer_factory(testing::tiny_gpt_config()),
                      optimizer ? optimizer : testing::momentum_sgd(), options);
}

// One process driving as many host devices as the whole world has.
DataParallel one_process_run(int devices, ShardMode shard = ShardMode::kNone,
                             OptimizerFactory optimizer = {}) {
  DataParallelOptions options;
  options.shard = shard;
  return DataParallel(testing::hosts(devices), transformer_factory(testing::tiny_gpt_config()),
                      optimizer ? optimizer : testing::momentum_sgd(), options);
}

// Every process's `bytes` equal process 0's.
bool same_on_every_process(const std::vector<float>& values) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the bytes
  for (const unsigned char byte :
       std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float))) {
    hash = (hash ^ byte) * 1099511628211ull;
  }
  if (!World::current().uses_mpi()) return true;
  std::vector<uint64_t> all(static_cast<size_t>(World::current().size()));
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  for (uint64_t h : all) {
    if (h != all[0]) return false;
  }
  return true;
}

bool same_text_on_every_process(const std::string& text) {
  std::vector<float> bytes(text.begin(), text.end());
  return same_on_every_process(bytes);
}

TEST(MpiTraining, MatchesOneProcessDrivingEveryDevice) {
  barrier();
  const int replicas = World::current().replicas();
  DataParallel across = world_run();
  ASSERT_EQ(across.size(), replicas);
  ASSERT_EQ(across.local_size(), static_cast<int>(World::current().local_devices().size()));
  const Trained world = train(across, 20);
  DataParallel alone = one_process_run(replicas);
  const Trained reference = train(alone, 20);
  // The sums run in another order (local ranks, then processes): last-bit differences.
  for (size_t s = 0; s < world.losses.size(); ++s) {
    const double rel = std::abs(world.losses[s] - reference.losses[s]) /
                       std::max(1e-6, std::abs(static_cast<double>(reference.losses[s])));
    EXPECT_LE(rel, 1e-5) << "step " << s + 1 << ": " << world.losses[s] << " vs "
                         << reference.losses[s];
  }
  EXPECT_LT(world.losses.back(), world.losses.front());  // it trains
  EXPECT_LE(testing::max_relative_difference(world.parameters, reference.parameters), 1e-4);
  EXPECT_TRUE(same_on_every_process(world.parameters)) << "replicas drifted apart";
}

TEST(MpiTraining, SameWorldShapeIsBitwiseRepeatable) {
  barrier();
  Trained first, second;
  {
    DataParallel dp = world_run(ShardMode::kNone, make_optimizer_factory({}));
    first = train(dp, 6);
  }
  {
    DataParallel dp = world_run(ShardMode::kNone, make_optimizer_factory({}));
    second = train(dp, 6);
  }
  EXPECT_EQ(first.losses, second.losses);
  EXPECT_EQ(first.parameters, second.parameters);
  EXPECT_TRUE(same_on_every_process(first.parameters));
}

// Note [The bf16 copy of the weights] across processes: the copy follows the initial broadcast
// and ZeRO-1's all-gather over every process, so bf16 training with it is bitwise training
// without it (weights rounded in every product).
TEST(MpiTraining, Bf16WeightCopyTrainsBitwiseAsRoundingInEveryProduct) {
  barrier();
  for (const ShardMode shard : {ShardMode::kNone, ShardMode::kOptimizer}) {
    Trained runs[2];
    for (const bool copy : {true, false}) {
      DataParallelOptions options;
      options.shard = shard;
      options.precision = Precision::kBF16;
      options.bf16_weight_copy = copy;
      DataParallel dp(World::current(), transformer_factory(testing::tiny_gpt_config()),
                      make_optimizer_factory({"adamw", 3e-3f}), options);
      runs[copy ? 0 : 1] = train(dp, 4);
    }
    EXPECT_EQ(runs[0].losses, runs[1].losses) << shard_mode_name(shard);
    EXPECT_EQ(runs[0].parameters, runs[1].parameters) << shard_mode_name(shard);
    EXPECT_TRUE(same_on_every_process(runs[0].parameters)) << shard_mode_name(shard);
  }
}

TEST(MpiTraining, EvaluationCountsEveryExampleOnce) {
  barrier();
  const data::Batch rows = token_batch(37, 7);  // not a multiple of the replica count
  const data::Dataset dataset = dataset_of(rows);
  DataParallel across = world_run();
  train(across, 2);
  const EvalResult world = across.evaluate(dataset, 4);
  DataParallel alone = one_process_run(1);
  train(alone, 2);
  const EvalResult reference = alone.evaluate(dataset, 4);
  EXPECT_EQ(world.examples, reference.examples);
  EXPECT_NEAR(world.loss, reference.loss, 1e-5 * reference.loss);
  EXPECT_NEAR(world.accuracy, reference.accuracy, 1.0 / static_cast<double>(world.examples));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Process 0 writes whole tensors, the optimizer's ranges gathered from every process (ZeRO-1):
// one process with one device loads it bitwise and writes the same files back.
TEST(MpiTraining, ShardedCheckpointLoadsIntoAnyWorldShape) {
  barrier();
  const World& world = World::current();
  std::string dir;
  if (world.rank() == 0) {
    char name[] = "/tmp/lockstep-mpi-checkpoint-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir = name;
  }
  dir = mpi::broadcast_string(dir, 0, std::chrono::seconds(30), "test: checkpoint directory");
  DataParallel across = world_run(ShardMode::kOptimizer, make_optimizer_factory({}));
  train(across, 3);
  const std::string saved = across.save(dir + "/world", {0, 3});
  DataParallel alone = one_process_run(1, ShardMode::kNone, make_optimizer_factory({}));
  const TrainingPosition position = alone.load(saved);
  EXPECT_EQ(position.batch_index, 3);
  EXPECT_EQ(alone.steps_taken(), 3);
  // Bitwise (the flat buffers differ only in the shards' padding).
  EXPECT_EQ(testing::max_relative_difference(alone.named_parameters(0), across.named_parameters(0)),
            0.0);
  barrier();  // every process has loaded before process 0 writes again and removes the files
  if (world.rank() == 0) {
    const std::string again = alone.save(dir + "/alone");
    EXPECT_EQ(read_file(again + "/optimizer.safetensors"),
              read_file(saved + "/optimizer.safetensors"));
    EXPECT_EQ(read_file(again + "/model.safetensors"), read_file(saved + "/model.safetensors"));
    std::filesystem::remove_all(dir);
  }
}

// ZeRO-3 across processes: each replica of every process keeps its range of the parameters, and
// the gathers (broadcasts from the owners) run over every process. The losses are bitwise ZeRO-2's
// on the same world, and its checkpoint (every process's ranges gathered by process 0) loads
// into one process with one device exactly as ZeRO-2's does.
TEST(MpiTraining, ShardedParametersMatchZeroTwoAndCheckpointWhole) {
  barrier();
  const World& world = World::current();
  std::string dir;
  if (world.rank() == 0) {
    char name[] = "/tmp/lockstep-mpi-zero3-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir = name;
  }
  dir = mpi::broadcast_string(dir, 0, std::chrono::seconds(30), "test: checkpoint directory");
  std::vector<float> losses[2];
  std::string saved[2];
  for (int m = 0; m < 2; ++m) {
    const ShardMode shard = m == 0 ? ShardMode::kGradients : ShardMode::kParameters;
    DataParallel dp = world_run(shard, make_optimizer_factory({}));
    for (int s = 0; s < 4; ++s) {
      losses[m].push_back(dp.step(token_batch(kBatch, 100 + static_cast<uint32_t>(s))).loss);
    }
    saved[m] = dp.save(dir + "/" + shard_mode_name(shard), {0, 4});
    if (shard == ShardMode::kParameters && world.size() > 1) {  // no process holds them all
      EXPECT_THROW(dp.parameters(0), Error);
    }
  }
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_LT(losses[1].back(), losses[1].front());  // it trains
  DataParallel zero2 = one_process_run(1, ShardMode::kNone, make_optimizer_factory({}));
  DataParallel zero3 = one_process_run(1, ShardMode::kNone, make_optimizer_factory({}));
  zero2.load(saved[0]);
  zero3.load(saved[1]);
  EXPECT_EQ(testing::max_relative_difference(zero3.named_parameters(0), zero2.named_parameters(0)),
            0.0);
  barrier();  // every process has loaded before process 0 removes the files
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

// Pipelines across processes: every process holds whole 2-stage pipelines, stage s all-reduces
// over every process; equal to one process driving every device the same way (same pipeline
// numbering, so the same shards), and its checkpoint written by process 0 alone.
TEST(MpiPipeline, MatchesOneProcessDrivingEveryDevice) {
  barrier();
  const World& world = World::current();
  PipelineOptions options;
  options.stages = 2;
  options.micro_batches = 2;
  bool divisible = true;
  for (int q = 0; q < world.size(); ++q)
    divisible = divisible && world.local_device_count(q) % 2 == 0;
  if (!divisible) {  // a stage cannot span processes: refused alike in every process
    try {
      Pipeline refused(world, transformer_factory(testing::tiny_gpt_config()),
                       testing::momentum_sgd(), options);
      ADD_FAILURE() << "a pipeline over processes with odd device counts was built";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a multiple of the stages"), std::string::npos)
          << e.what();
    }
    return;
  }
  Pipeline across(world, transformer_factory(testing::tiny_gpt_config()), testing::momentum_sgd(),
                  options);
  ASSERT_EQ(across.pipelines(), world.replicas() / 2);
  Pipeline alone(testing::hosts(world.replicas()), transformer_factory(testing::tiny_gpt_config()),
                 testing::momentum_sgd(), options);
  for (int s = 0; s < 10; ++s) {
    const data::Batch batch = token_batch(kBatch, 300 + static_cast<uint32_t>(s));
    const float a = across.step(batch).loss, b = alone.step(batch).loss;
    EXPECT_LE(std::abs(a - b) / std::max(1e-6f, std::abs(b)), 1e-5) << "step " << s + 1;
  }
  EXPECT_LE(testing::max_relative_difference(across.named_parameters(), alone.named_parameters()),
            1e-4);
  std::vector<float> flat;
  for (const auto& p : across.named_parameters())
    flat.insert(flat.end(), p.values.begin(), p.values.end());
  EXPECT_TRUE(same_on_every_process(flat)) << "pipelines drifted apart";
  const data::Batch rows = token_batch(29, 9);
  const data::Dataset dataset = dataset_of(rows);
  const EvalResult e1 = across.evaluate(dataset, 4), e2 = alone.evaluate(dataset, 4);
  EXPECT_EQ(e1.examples, e2.examples);
  EXPECT_NEAR(e1.loss, e2.loss, 1e-5 * e2.loss);
  // Process 0 writes; a one-device DataParallel loads it and holds the same parameters.
  std::string dir;
  if (world.rank() == 0) {
    char name[] = "/tmp/lockstep-mpi-pipeline-XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir = name;
  }
  dir = mpi::broadcast_string(dir, 0, std::chrono::seconds(30), "test: checkpoint directory");
  const std::string saved = across.save(dir, {0, 10});
  DataParallel one = one_process_run(1);
  EXPECT_EQ(one.load(saved).batch_index, 10);
  EXPECT_EQ(testing::max_relative_difference(one.named_parameters(0), across.named_parameters()),
            0.0);
  barrier();
  if (world.rank() == 0) std::filesystem::remove_all(dir);
}

// A fault in process 1's first replica; every process's step must end with the same error,
// long before the collective timeout (so the failure travelled, not a timeout).
struct FaultCase {
  Fault::Kind kind;
  const char* expected;  // in every process's message
};

class MpiFailure : public ::testing::TestWithParam<FaultCase> {};

TEST_P(MpiFailure, AFaultInProcess1EndsEveryProcess) {
  const World& world = World::current();
  if (world.size() < 2) GTEST_SKIP() << "needs two processes";
  barrier();
  const int victim = world.first_replica(1);
  Fault fault{GetParam().kind, victim, 2, std::chrono::milliseconds(0)};
  DataParallelOptions options;
  options.timeout = std::chrono::seconds(20);
  // A replica that never issues a collective, or is stuck in its own code, ends in the
  // watchdog's report (or, with one replica in process 1, a desync between the processes).
  if (fault.kind == Fault::Kind::kStall || fault.kind == Fault::Kind::kSkipCollective) {
    fault.stall = std::chrono::milliseconds(3000);
    options.timeout = std::chrono::milliseconds(1000);
  }
  // Each process writes its flight recorder's file into a folder of its own.
  char flight_folder[] = "/tmp/lockstep-mpi-flights-XXXXXX";
  ASSERT_NE(mkdtemp(flight_folder), nullptr);
  const std::string flights = flight_folder;
  options.flight_recorder_dir = flights;
  const Clock::time_point start = Clock::now();
  std::string message, text;
  {
    const std::unique_ptr<DataParallel> faulty = make_data_parallel(
        world, testing::with_fault(transformer_factory(testing::tiny_gpt_config()), fault),
        testing::with_fault(testing::momentum_sgd(), fault), options, testing::with_fault(fault));
    DataParallel& dp = *faulty;
    for (int s = 0; s < 4 && message.empty(); ++s) {
      try {
        dp.step(token_batch(kBatch, 5));
      } catch (const Error& e) {
        message = e.what();
        text = e.message();  // without the location where this process raised it
      }
    }
    EXPECT_THROW(dp.step(token_batch(kBatch, 5)), Error) << "usable after a failure";
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(message.empty()) << "no step failed in process " << world.rank();
  std::printf("process %d ended after %.2f s with: %s\n", world.rank(), elapsed, message.c_str());
  EXPECT_NE(message.find(GetParam().expected), std::string::npos)
      << "process " << world.rank() << ": " << message;
  EXPECT_LT(elapsed, 10.0) << message;
  // An exception travels as a notice: every process ends with process 1's message, word for word
  // (without notices each would report its own aborted collective, at its own timeout). Hangs
  // may be reported by two watchdogs at once, each its own report, so those are not compared.
  if (fault.kind == Fault::Kind::kThrowInBackward || fault.kind == Fault::Kind::kThrowInOptimizer) {
    EXPECT_EQ(message.rfind("process 1 of", 0), 0u) << message;
    EXPECT_TRUE(same_text_on_every_process(text)) << message;
  }
  // A hang leaves every process's flight recorder file, named in its error
  // (tests/doctor/flight_analysis_test.cpp reads such files).
  if (fault.kind == Fault::Kind::kStall || fault.kind == Fault::Kind::kSkipCollective) {
    const std::string own = "-p" + std::to_string(world.rank()) + ".json";
    EXPECT_NE(message.find("lockstep-doctor --flight " + flights), std::string::npos) << message;
    EXPECT_NE(message.find(own + ")"), std::string::npos) << message;
    bool found = false;
    for (const auto& entry : std::filesystem::directory_iterator(flights)) {
      const std::string name = entry.path().string();
      if (name.size() < own.size() || name.compare(name.size() - own.size(), own.size(), own) != 0)
        continue;
      std::ifstream in(name);
      const std::string body((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      found = body.find("\"format\": \"lockstep-flight/1\"") != std::string::npos &&
              body.find("\"process\": " + std::to_string(world.rank())) != std::string::npos;
    }
    EXPECT_TRUE(found) << "process " << world.rank() << ": no flight recorder file in " << flights;
  }
  std::filesystem::remove_all(flights);
  // Process 0's watchdog names the process its collective still waits for.
  if (fault.kind == Fault::Kind::kStall && message.rfind("process 0 of", 0) == 0) {
    const std::string awaited = "waiting for process 1 on " + world.host_name(1);
    EXPECT_NE(message.find(awaited), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, MpiFailure,
    ::testing::Values(
        FaultCase{Fault::Kind::kThrowInBackward,
                  "failed in step (step 2, backward): injected fault: exception in backward"},
        FaultCase{Fault::Kind::kThrowInOptimizer, "injected fault: exception in optimizer"},
        FaultCase{Fault::Kind::kSkipCollective, "#"},
        FaultCase{Fault::Kind::kStall, "collective timeout"}),
    [](const auto& info) {
      switch (info.param.kind) {
        case Fault::Kind::kThrowInBackward: return std::string("ThrowInBackward");
        case Fault::Kind::kThrowInOptimizer: return std::string("ThrowInOptimizer");
        case Fault::Kind::kSkipCollective: return std::string("SkippedCollective");
        default: return std::string("Stall");
      }
    });

}  // namespace
}  // namespace ls::mpi_test
