#include "programs/train/train_options.h"

#include <string>
#include <vector>

#include "programs/common/cli.h"

namespace {

using ls::cli::UsageError;

constexpr const char* kDescription =
    "Trains a model on every device given, one replica each, and reports its test loss, "
    "accuracy and throughput.";
constexpr const char* kFooter =
    "Ctrl-C or SIGTERM stops the run after the current step (writing a checkpoint when "
    "--checkpoint-dir is given); a second one stops it at once.\n"
    "Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 / 143 stopped by SIGINT / "
    "SIGTERM.";

void add_model_flags(CLI::App& app, TrainOptions& o) {
  ls::cli::add_model(app, o.model, {"mlp", "gpt", "classifier", "bag-of-bytes"});
  ls::cli::add_data(app, o.data_dir);
  ls::cli::add_model_shape(app, o, "default: mlp 256, i.e. 784-256-10; transformers 256");
  const auto group = "Model";
  app.add_option("--dropout", o.dropout,
                 "dropout of embeddings, attention and residual branches")
      ->capture_default_str()->check(ls::cli::in_range(0, 1))->group(group);
  app.add_option("--layout", o.layout,
                 "classifier: gpt2 (pre-norm, causal, last-real-token pooling) or bert "
                 "(post-norm, bidirectional, first-token pooling)")
      ->capture_default_str()->check(ls::cli::one_of({"gpt2", "bert"}, "layout"))->group(group);
  app.add_option("--pooling", o.pooling,
                 "classifier: last, first or mean over the real (non-padding) tokens (default: "
                 "the layout's)")
      ->check(ls::cli::one_of({"last", "first", "mean"}, "pooling"))->group(group);
  app.add_option("--init", o.init,
                 "start from a Hugging Face checkpoint (config.json, model.safetensors; GPT-2 or "
                 "BERT); its sizes replace --layers/--heads/--hidden")
      ->type_name("DIR")->group(group);
  app.add_option("--tokenizer", o.tokenizer,
                 "GPT-2 BPE vocabulary (vocab.json, merges.txt) instead of byte tokens")
      ->type_name("DIR")->group(group);
}

void add_training_flags(CLI::App& app, TrainOptions& o) {
  ls::cli::add_optimizer(app, o);
  const auto group = "Training";
  app.add_option("--max-examples", o.max_examples, "use at most N training examples")
      ->check(ls::cli::positive())->group(group);
  app.add_option("--eval-examples", o.eval_examples,
                 "evaluate on the first N test examples (default: gpt 512 of its held-out 2% of "
                 "the corpus; others the whole test set)")
      ->check(ls::cli::positive())->group(group);
  app.add_option("--epochs", o.epochs,
                 "passes over the training set (default: mlp 8, classifier 3, bag-of-bytes 20)")
      ->check(ls::cli::positive())->group(group);
  app.add_option("--steps", o.steps, "train exactly N steps instead of whole epochs (gpt: 300)")
      ->check(ls::cli::positive())->group(group);
  app.add_option("--batch", o.batch,
                 "global batch size, split across the devices (default: mlp 128, transformers 32)")
      ->check(ls::cli::positive())->group(group);
  app.add_option("--accumulate", o.accumulate,
                 "K micro-batches per step, gradients all-reduced after the last")
      ->capture_default_str()->check(ls::cli::positive())->group(group);
}

void add_parallel_flags(CLI::App& app, TrainOptions& o) {
  ls::cli::add_devices(app, o.devices);
  ls::cli::add_data_parallel(app, o);
  ls::cli::add_pipeline_schedule(app, o);
  ls::cli::add_device_memory(app, o.device_memory_gb);
  const auto group = "Parallelism";
  app.add_flag("--uneven-shards", o.uneven_shards,
               "allow a global batch that does not divide by the device count")
      ->group(group);
  app.add_option("--pipeline", o.pipeline,
                 "pipeline parallelism: the model's layers in P stages, one per device (devices "
                 "a multiple of P: devices/P pipelines, data-parallel)")
      ->type_name("P")->check(ls::cli::positive())->group(group);
  app.add_option_function<std::string>(
         "--grad-reduce",
         [&o](const std::string& v) { o.grad_reduce = v == "bf16" ? ls::DType::kBF16 : ls::DType::kF32; },
         "f32 (default) or bf16: the type gradients are all-reduced in (bf16 halves the bytes; "
         "not with --shard gradients or parameters)")
      ->type_name("T")->check(ls::cli::one_of({"f32", "bf16"}, "type"))->group(group);
  app.add_option("--strategy", o.strategy,
                 "manual (as --shard, --recompute and --pipeline say) or auto: run the planner "
                 "(lockstep-plan) and use the first strategy that fits in data parallel, ZeRO-1, "
                 "ZeRO-2, the three with --recompute blocks, pipeline order")
      ->capture_default_str()->check(ls::cli::one_of({"manual", "auto"}, "strategy"))
      ->group(group);
  app.add_option("--collective-timeout-s", o.collective_timeout_s,
                 "a collective waiting longer stops the run with a report of where every replica "
                 "is")
      ->capture_default_str()->check(ls::cli::positive())->group(group);
}

void add_output_flags(CLI::App& app, TrainOptions& o) {
  const auto group = "Output";
  app.add_option("--heartbeat-s", o.heartbeat_s,
                 "while a step runs longer, print where every replica is")
      ->capture_default_str()->check(ls::cli::positive())->group(group);
  app.add_option("--telemetry", o.telemetry_path,
                 "append one JSON line per device every --telemetry-interval-s to FILE, flushed to "
                 "the disk: step, memory, and on GPUs power, temperature, clocks, throttle "
                 "reasons: the last seconds before a freeze")
      ->type_name("FILE")->group(group);
  app.add_option("--flight-dir", o.flight_dir,
                 "where a hang or a desync writes every replica's last collectives (one JSON "
                 "file per process, named in the error; lockstep-doctor --flight FILE analyses "
                 "it); default: the system's temporary directory")
      ->type_name("DIR")->group(group);
  app.add_option("--telemetry-interval-s", o.telemetry_interval_s, "seconds between telemetry lines")
      ->capture_default_str()->check(ls::cli::positive())->check(ls::cli::at_most(86400))
      ->group(group);
  app.add_option("--log-every", o.log_every, "print progress every N steps (0: only the summary)")
      ->capture_default_str()->check(ls::cli::non_negative())->group(group);
  ls::cli::add_json(app, o.json_path);
  ls::cli::add_trace(app, o.trace);
  app.add_option("--export-hf", o.export_hf,
                 "after training, write the model as a Hugging Face checkpoint")
      ->type_name("DIR")->group(group);
}

void add_checkpoint_flags(CLI::App& app, TrainOptions& o) {
  const auto group = "Checkpoints";
  CLI::Option* dir =
      app.add_option("--checkpoint-dir", o.checkpoint_dir,
                     "save checkpoints in DIR (DIR/step-NNNNNN, DIR/latest) at the end")
          ->type_name("DIR")->group(group);
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "... and every K steps; also when stopped by Ctrl-C or SIGTERM")
      ->type_name("K")->check(ls::cli::positive())->needs(dir)->group(group);
  app.add_option("--keep-checkpoints", o.keep_checkpoints,
                 "keep the newest N checkpoints, removing older ones after each save (0 keeps all)")
      ->capture_default_str()->check(ls::cli::non_negative())->check(ls::cli::at_most(1000000))
      ->needs(dir)->group(group);
  app.add_option("--keep-every", o.keep_every,
                 "... and also every checkpoint whose step is a multiple of K")
      ->type_name("K")->check(ls::cli::positive())->needs(dir)->group(group);
  app.add_flag("--resume", o.resume,
               "continue from DIR/latest (same flags; --steps/--epochs is the total)")
      ->needs(dir)->group(group);
}

// Flags that do not combine, and flags the chosen strategy would ignore.
void check_combinations(const CLI::App& app, const TrainOptions& o) {
  const auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  const bool transformer = o.model == "gpt" || o.model == "classifier";
  if (!transformer && (given("--init") || given("--export-hf") || given("--tokenizer")))
    throw UsageError("--init, --export-hf and --tokenizer are for --model gpt or classifier");
  if (transformer && o.hidden.size() > 1)
    throw UsageError("--hidden takes one width (the hidden size) for --model " + o.model);
  if (o.strategy == "auto" && (given("--pipeline") || given("--shard") || given("--recompute")))
    throw UsageError("--strategy auto chooses --shard, --recompute and --pipeline itself; drop them");
  const bool shards_gradients =
      o.shard == ls::ShardMode::kGradients || o.shard == ls::ShardMode::kParameters;
  if (o.grad_reduce == ls::DType::kBF16 && shards_gradients)
    throw UsageError(std::string("--grad-reduce bf16 does not combine with --shard ") +
                     ls::shard_mode_name(o.shard) + "; use --shard optimizer or f32 reduction");
  if (o.shard == ls::ShardMode::kParameters && o.precision != ls::Precision::kF32)
    throw UsageError(std::string("--shard parameters (ZeRO-3) trains in f32 only; drop ") +
                     "--precision " + ls::precision_name(o.precision) +
                     " or use --shard gradients with it");
  if (o.pipeline > 0) {
    // What a pipeline does not have yet is refused, not ignored (issue 23 gives it the rest).
    for (const char* flag : {"--accumulate", "--shard", "--uneven-shards", "--precision",
                             "--grad-reduce", "--graphs"}) {
      if (given(flag))
        throw UsageError(std::string("--pipeline does not take ") + flag +
                         " yet (pipelines run in f32 and eagerly; "
                         "--micro-batches replaces --accumulate); drop it");
    }
  } else if (o.strategy == "manual") {  // auto may choose a pipeline: then they apply
    for (const char* flag : {"--schedule", "--micro-batches"}) {
      if (given(flag)) throw UsageError(std::string(flag) + " is for --pipeline P; drop it");
    }
  }
  if (given("--device-memory-gb") && o.strategy != "auto")
    throw UsageError("--device-memory-gb is for --strategy auto; drop it");
  if (given("--telemetry-interval-s") && o.telemetry_path.empty())
    throw UsageError("--telemetry-interval-s needs --telemetry FILE");
  if (given("--trace-steps") && o.trace.path.empty())
    throw UsageError("--trace-steps needs --trace FILE");
  if (given("--pooling") && o.model != "classifier")
    throw UsageError("--pooling is for --model classifier");
}

// The defaults that depend on the model.
void apply_model_defaults(TrainOptions& o) {
  const bool transformer = o.model == "gpt" || o.model == "classifier";
  if (o.batch == 0) o.batch = transformer ? 32 : 128;
  if (o.epochs == 0 && o.steps == 0) {
    if (o.model == "gpt") {
      o.steps = 300;
    } else {
      o.epochs = o.model == "classifier" ? 3 : (o.model == "bag-of-bytes" ? 20 : 8);
    }
  }
}

}  // namespace

std::variant<TrainOptions, int> parse_train_options(int argc, char** argv) {
  TrainOptions o;
  CLI::App app(kDescription, "lockstep-train");
  app.footer(kFooter);
  add_model_flags(app, o);
  add_training_flags(app, o);
  add_parallel_flags(app, o);
  add_output_flags(app, o);
  add_checkpoint_flags(app, o);
  if (const std::optional<int> exit_code = ls::cli::parse(app, argc, argv)) return *exit_code;
  o.choose_buckets = app.count("--bucket-mb") == 0;
  try {
    check_combinations(app, o);
  } catch (const UsageError& e) {
    return ls::cli::usage_error(app, e.what());
  }
  apply_model_defaults(o);
  return o;
}
