#include "programs/common/flags.h"

#include <exception>
#include <string>
#include <utility>

#include "programs/common/cli.h"

namespace ls::cli {
namespace {

constexpr const char* kModelGroup = "Model";
constexpr const char* kTrainingGroup = "Training";
constexpr const char* kParallelGroup = "Parallelism";
constexpr const char* kOutputGroup = "Output";

// What each model a program may build is (programs/common/workload.h).
std::string model_help(const std::string& name) {
  if (name == "mlp") return "mlp: an MLP on Fashion-MNIST images (784-hidden-10)";
  if (name == "gpt") return "gpt: a GPT-2-layout language model on dict-gcide's English text";
  if (name == "classifier")
    return "classifier: a transformer + 4-way linear head on WordNet noun glosses (supersenses "
           "animal, artifact, food, plant)";
  if (name == "bag-of-bytes")
    return "bag-of-bytes: the classifier's baseline, logistic regression on the glosses' byte "
           "frequencies";
  return name;
}

}  // namespace

CLI::Option* add_devices(CLI::App& app, std::string& spec) {
  return app
      .add_option("--devices", spec,
                  "the devices, one replica each: host:N (N host devices), host (one per core), "
                  "cuda (every GPU), cuda:I,J,... (those GPUs), auto (every GPU, else one host "
                  "device per core)")
      ->type_name("SPEC")
      ->capture_default_str()
      ->group(kParallelGroup);
}

CLI::Option* add_model(CLI::App& app, std::string& model, const std::vector<std::string>& models) {
  std::string help = "the model to build:";
  for (const std::string& name : models) help += "\n" + model_help(name);
  return app.add_option("--model", model, help)
      ->type_name("NAME")
      ->capture_default_str()
      ->check(one_of(models, "model"))
      ->group(kModelGroup);
}

CLI::Option* add_data(CLI::App& app, std::string& path) {
  return app
      .add_option("--data", path,
                  "the model's data (default: its Debian package's files: mlp "
                  "/usr/share/datasets/fashion-mnist, gpt /usr/share/dictd/gcide.dict.dz, "
                  "classifier and bag-of-bytes /usr/share/wordnet/data.noun)")
      ->type_name("PATH")
      ->group(kModelGroup);
}

void add_model_shape(CLI::App& app, ModelShapeFlags& flags, const std::string& hidden_default) {
  app.add_option("--hidden", flags.hidden,
                 "mlp: hidden widths; transformers: the hidden size (" + hidden_default + ")")
      ->type_name("W[,W...]")
      ->delimiter(',')
      ->check(positive())
      ->group(kModelGroup);
  app.add_option("--layers", flags.layers, "transformer blocks")
      ->capture_default_str()
      ->check(positive())
      ->group(kModelGroup);
  app.add_option("--heads", flags.heads, "attention heads")
      ->capture_default_str()
      ->check(positive())
      ->group(kModelGroup);
  app.add_option("--seq", flags.seq, "tokens per example")
      ->capture_default_str()
      ->check(positive())
      ->group(kModelGroup);
}

void add_optimizer_kind(CLI::App& app, OptimizerFlags& flags) {
  app.add_option("--optimizer", flags.optimizer, "adamw or sgd")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(one_of({"adamw", "sgd"}, "optimizer"))
      ->group(kTrainingGroup);
  app.add_option("--momentum", flags.momentum, "SGD momentum")
      ->capture_default_str()
      ->check(in_range(0, 1))
      ->group(kTrainingGroup);
}

void add_optimizer(CLI::App& app, OptimizerFlags& flags) {
  add_optimizer_kind(app, flags);
  app.add_option("--lr", flags.lr, "learning rate")
      ->capture_default_str()
      ->check(positive())
      ->group(kTrainingGroup);
  app.add_option("--weight-decay", flags.weight_decay, "AdamW decoupled weight decay / SGD L2")
      ->capture_default_str()
      ->check(non_negative())
      ->group(kTrainingGroup);
  app.add_option("--seed", flags.seed, "seed for initialisation and shuffling")
      ->capture_default_str()
      ->check(non_negative())
      ->group(kTrainingGroup);
}

CLI::Option* add_bucket_mb(CLI::App& app, double& mib) {
  return app.add_option("--bucket-mb", mib,
                        "gradient bucket cap in MiB (the first bucket is 1 MiB); without it "
                        "lockstep-plan and --strategy auto choose one")
      ->capture_default_str()
      ->check(positive())
      ->group(kParallelGroup);
}

void add_data_parallel(CLI::App& app, DataParallelFlags& flags) {
  add_bucket_mb(app, flags.bucket_mb);
  app.add_option_function<std::string>(
         "--shard", [&flags](const std::string& v) { flags.shard = shard_mode_of(v); },
         "none (default); optimizer: ZeRO-1, each device keeps the optimizer state of 1/N of the "
         "parameters; gradients: ZeRO-2, also 1/N of the summed gradients; parameters: ZeRO-3, "
         "also 1/N of the parameters, each layer's gathered as it runs (f32 only) (same "
         "results, less memory)")
      ->type_name("MODE")
      ->check(one_of({"none", "optimizer", "gradients", "parameters"}, "shard mode"))
      ->group(kParallelGroup);
  app.add_option_function<std::string>(
         "--recompute",
         [&flags](const std::string& v) {
           flags.recompute = v == "blocks" ? Recompute::kBlocks : Recompute::kNone;
         },
         "none (default); blocks: activation checkpointing, each transformer block keeps only "
         "its input and recomputes its forward in backward (same results, less activation "
         "memory, about one more forward pass; an MLP's layers keep their input anyway, so it "
         "only costs time there)")
      ->type_name("MODE")
      ->check(one_of({"none", "blocks"}, "recompute mode"))
      ->group(kParallelGroup);
  app.add_option_function<std::string>(
         "--precision", [&flags](const std::string& v) { flags.precision = *parse_precision(v); },
         "f32 (default), bf16 or f16: the precision of every matrix product's operands (f32 "
         "accumulation; weights, gradients and optimizer state stay f32); f16 scales the loss "
         "dynamically")
      ->type_name("P")
      ->check(one_of({"f32", "bf16", "f16"}, "precision"))
      ->group(kParallelGroup);
  CLI::Option* eager =
      app.add_flag_callback("--no-graphs", [&flags] { flags.graphs = false; },
                            "run every step eagerly (by default a step of an unchanged shape is "
                            "captured once as a graph and launched after two warm-up steps; not "
                            "on several GPUs of one process until that is shown safe: "
                            "docs/gpu.md)")
          ->group(kParallelGroup);
  app.add_flag_callback("--graphs", [&flags] { flags.graphs = true; },
                        "run steps as graphs on several GPUs of one process too")
      ->excludes(eager)
      ->group(kParallelGroup);
  app.add_option("--host-threads", flags.host_threads, "cores per host device")
      ->capture_default_str()
      ->check(positive())
      ->group(kParallelGroup);
}

void add_pipeline_schedule(CLI::App& app, PipelineScheduleFlags& flags) {
  app.add_option("--schedule", flags.schedule, "pipeline schedule: 1f1b, gpipe or zb-h1 (zero bubble)")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(one_of({"1f1b", "gpipe", "zb-h1"}, "schedule"))
      ->group(kParallelGroup);
  app.add_option("--micro-batches", flags.micro_batches, "pipeline micro-batches per step")
      ->capture_default_str()
      ->check(positive())
      ->group(kParallelGroup);
}

CLI::Option* add_device_memory(CLI::App& app, double& gb) {
  return app
      .add_option("--device-memory-gb", gb,
                  "memory per device for the planner (default for host devices: MemAvailable / "
                  "devices)")
      ->check(positive())
      ->group(kParallelGroup);
}

CLI::Option* add_json(CLI::App& app, std::string& path) {
  return app.add_option("--json", path, "write the results as JSON")
      ->type_name("PATH")
      ->group(kOutputGroup);
}

void add_trace(CLI::App& app, TraceOptions& trace) {
  app.add_option("--trace", trace.path,
                 "write a Chrome trace of the --trace-steps steps to FILE: every device's compute "
                 "and communication stream and the caller's thread on one time line (open it in "
                 "ui.perfetto.dev or chrome://tracing)")
      ->type_name("FILE")
      ->group(kOutputGroup);
  app.add_option_function<std::string>(
         "--trace-steps",
         [&trace](const std::string& text) {
           // FIRST:LAST, both whole numbers, 1 <= FIRST <= LAST.
           const size_t colon = text.find(':');
           size_t used_first = 0, used_last = 0;
           int64_t first = 0, last = 0;
           try {
             first = std::stoll(text.substr(0, colon), &used_first);
             last = colon == std::string::npos ? 0 : std::stoll(text.substr(colon + 1), &used_last);
           } catch (const std::exception&) {
             used_first = 0;
           }
           if (colon == std::string::npos || used_first != colon || used_first == 0 ||
               used_last != text.size() - colon - 1 || first < 1 || last < first) {
             throw CLI::ValidationError("--trace-steps",
                                        "'" + text + "' is not FIRST:LAST with 1 <= FIRST <= LAST "
                                        "(e.g. 4:8)");
           }
           trace.first_step = first;
           trace.last_step = last;
         },
         "the steps the trace covers, FIRST:LAST (default 4:8: after the warm-up)")
      ->type_name("A:B")
      ->group(kOutputGroup);
}

}  // namespace ls::cli
