// Parser for lockstep-train's flags (see train_options.h). Every flag but --help, --resume and
// --uneven-shards takes one value: `--flag value` or `--flag=value`.
#include "examples/train_options.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <string_view>

namespace {

using ls::cli::parse_number;
using ls::cli::parse_positive;

std::vector<int64_t> parse_widths(std::string_view flag, std::string_view text) {
  return ls::cli::parse_positive_list<int64_t>(flag, text);
}

}  // namespace

const char* train_usage() {
  return R"(usage: lockstep-train [options]
Trains a model data-parallel and reports its test loss, accuracy and throughput.

  --devices SPEC        devices to train on, one replica each: host:1 (default), host:N,
                        cuda, cuda:0,2, auto
  --model NAME          mlp (default): an MLP on Fashion-MNIST images;
                        gpt: a GPT-2-layout language model on dict-gcide's English text;
                        classifier: a transformer + 4-way linear head on WordNet noun glosses
                        (supersenses animal, artifact, food, plant);
                        bag-of-bytes: the classifier's baseline, logistic regression on the
                        glosses' byte frequencies
  --data PATH           the model's data (defaults, from Debian packages: mlp
                        /usr/share/datasets/fashion-mnist, gpt /usr/share/dictd/gcide.dict.dz,
                        classifier /usr/share/wordnet/data.noun)
  --hidden W[,W...]     mlp: hidden widths (default 256: 784-256-10); transformers: the hidden
                        size (default 256)
  --layers N, --heads N transformer blocks and attention heads (default 4, 4)
  --seq N               tokens per example (default 128)
  --dropout P           dropout of embeddings, attention and residual branches (default 0)
  --layout NAME         classifier: gpt2 (default: pre-norm, causal, last-real-token pooling)
                        or bert (post-norm, bidirectional, first-token pooling)
  --pooling NAME        classifier: last, first or mean over the real (non-padding) tokens
  --init DIR            start from a Hugging Face checkpoint (config.json, model.safetensors;
                        GPT-2 or BERT); its sizes replace --layers/--heads/--hidden
  --tokenizer DIR       GPT-2 BPE vocabulary (vocab.json, merges.txt) instead of byte tokens
  --export-hf DIR       after training, write the model as a Hugging Face checkpoint
  --max-examples N      use at most N training examples
  --eval-examples N     evaluate on the first N test examples (default: gpt 512 of its held-out
                        2% of the corpus; others the whole test set)
  --epochs N            passes over the training set (default: mlp 8, classifier 3)
  --steps N             train exactly N steps instead of whole epochs (gpt default 300)
  --batch N             global batch size, split across the devices (default: mlp 128,
                        transformers 32)
  --accumulate K        K micro-batches per step, gradients all-reduced after the last (default 1)
  --uneven-shards       allow a global batch that does not divide by the device count
  --pipeline P          pipeline parallelism: the model's layers in P stages, one per device
                        (devices a multiple of P: devices/P pipelines, data-parallel)
  --schedule NAME       pipeline schedule: 1f1b (default) or gpipe
  --micro-batches M     pipeline: micro-batches per step (default 4)
  --bucket-mb X         gradient bucket cap in MiB (default 25; the first bucket is 1 MiB)
  --precision P         f32 (default), bf16 or f16: the precision of every matrix product's
                        operands (f32 accumulation; weights, gradients and optimizer state stay
                        f32); f16 scales the loss dynamically
  --grad-reduce T       f32 (default) or bf16: the type gradients are all-reduced in (bf16
                        halves the bytes; not with --shard gradients)
  --no-graphs           run every step eagerly (by default a step of an unchanged shape is
                        captured once as a graph and launched after two warm-up steps; not
                        on several GPUs of one process until that is shown safe: docs/gpu.md)
  --graphs              run steps as graphs on several GPUs of one process too
  --shard MODE          none (default); optimizer: ZeRO-1, each device keeps the optimizer
                        state of 1/N of the parameters; gradients: ZeRO-2, also 1/N of the
                        summed gradients (same results, less memory)
  --strategy NAME       manual (default: as --shard and --pipeline say) or auto: run the
                        planner (lockstep-plan) and use the first strategy that fits in
                        data parallel, ZeRO-1, ZeRO-2, pipeline order
  --device-memory-gb X  --strategy auto: memory per device (default for host devices:
                        MemAvailable / devices)
  --collective-timeout-s X
                        a collective waiting longer stops the run with a report of where every
                        replica is (default 600)
  --heartbeat-s X       while a step runs longer, print where every replica is (default 30)
  --telemetry FILE      append one JSON line per device every --telemetry-interval-s (default
                        1) to FILE, flushed to the disk: step, memory, and on GPUs power,
                        temperature, clocks, throttle reasons: the last seconds before a freeze
  --optimizer NAME      adamw (default) or sgd
  --lr X                learning rate (default 1e-3)
  --momentum X          SGD momentum (default 0)
  --weight-decay X      AdamW decoupled weight decay / SGD L2 (default 0.01)
  --seed N              seed for initialisation and shuffling (default 1)
  --host-threads N      cores per host device (default 1)
  --log-every N         print progress every N steps (default 100; 0: only the summary)
  --json PATH           write the results as JSON
  --checkpoint-dir DIR  save checkpoints in DIR (DIR/step-NNNNNN, DIR/latest) at the end
  --checkpoint-every K  ... and every K steps; also when stopped by Ctrl-C or SIGTERM
  --keep-checkpoints N  keep the newest N checkpoints, removing older ones after each save
                        (default 3; 0 keeps all)
  --keep-every K        ... and also every checkpoint whose step is a multiple of K
  --resume              continue from DIR/latest (same flags; --steps/--epochs is the total)
  -h, --help            show this help

Ctrl-C or SIGTERM stops the run after the current step (writing a checkpoint when
--checkpoint-dir is given); a second one stops it at once.
Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 / 143 stopped by SIGINT / SIGTERM.
)";
}

TrainOptions parse_train_options(int argc, char** argv) {
  TrainOptions o;
  using Setter = ls::cli::FlagSetter;
  const std::map<std::string_view, Setter> setters = {
      {"--devices", [&](auto, auto v) { o.devices = v; }},
      {"--data", [&](auto, auto v) { o.data_dir = v; }},
      {"--model",
       [&](auto f, auto v) {
         if (v != "mlp" && v != "gpt" && v != "classifier" && v != "bag-of-bytes")
           throw UsageError(std::string(f) + ": unknown model '" + std::string(v) +
                            "'; available: mlp, gpt, classifier, bag-of-bytes");
         o.model = v;
       }},
      {"--hidden", [&](auto f, auto v) { o.hidden = parse_widths(f, v); }},
      {"--layers", [&](auto f, auto v) { o.layers = parse_positive<int64_t>(f, v); }},
      {"--heads", [&](auto f, auto v) { o.heads = parse_positive<int64_t>(f, v); }},
      {"--seq", [&](auto f, auto v) { o.seq = parse_positive<int64_t>(f, v); }},
      {"--dropout",
       [&](auto f, auto v) {
         o.dropout = parse_number<float>(f, v);
         if (!(o.dropout >= 0 && o.dropout < 1)) throw UsageError("--dropout must be in [0, 1)");
       }},
      {"--layout",
       [&](auto f, auto v) {
         if (v != "gpt2" && v != "bert")
           throw UsageError(std::string(f) + ": unknown layout '" + std::string(v) +
                            "'; use gpt2 or bert");
         o.layout = v;
       }},
      {"--pooling",
       [&](auto f, auto v) {
         if (v != "last" && v != "first" && v != "mean")
           throw UsageError(std::string(f) + ": unknown pooling '" + std::string(v) +
                            "'; use last, first or mean");
         o.pooling = v;
       }},
      {"--init", [&](auto, auto v) { o.init = v; }},
      {"--tokenizer", [&](auto, auto v) { o.tokenizer = v; }},
      {"--export-hf", [&](auto, auto v) { o.export_hf = v; }},
      {"--max-examples", [&](auto f, auto v) { o.max_examples = parse_positive<int64_t>(f, v); }},
      {"--eval-examples", [&](auto f, auto v) { o.eval_examples = parse_positive<int64_t>(f, v); }},
      {"--epochs", [&](auto f, auto v) { o.epochs = parse_positive<int64_t>(f, v); }},
      {"--steps", [&](auto f, auto v) { o.steps = parse_positive<int64_t>(f, v); }},
      {"--batch", [&](auto f, auto v) { o.batch = parse_positive<int64_t>(f, v); }},
      {"--accumulate", [&](auto f, auto v) { o.accumulate = parse_positive<int64_t>(f, v); }},
      {"--pipeline", [&](auto f, auto v) { o.pipeline = parse_positive<int>(f, v); }},
      {"--strategy",
       [&](auto f, auto v) {
         if (v != "manual" && v != "auto")
           throw UsageError(std::string(f) + ": unknown strategy '" + std::string(v) +
                            "'; use manual or auto");
         o.strategy = v;
       }},
      {"--device-memory-gb",
       [&](auto f, auto v) { o.device_memory_gb = parse_positive<double>(f, v); }},
      {"--schedule",
       [&](auto f, auto v) {
         if (v != "1f1b" && v != "gpipe")
           throw UsageError(std::string(f) + ": unknown schedule '" + std::string(v) +
                            "'; use 1f1b or gpipe");
         o.schedule = v;
       }},
      {"--micro-batches", [&](auto f, auto v) { o.micro_batches = parse_positive<int>(f, v); }},
      {"--bucket-mb", [&](auto f, auto v) { o.bucket_mb = parse_positive<double>(f, v); }},
      {"--shard", [&](auto f, auto v) { o.shard = ls::cli::parse_shard_mode(f, v); }},
      {"--precision", [&](auto f, auto v) { o.precision = ls::cli::parse_precision_flag(f, v); }},
      {"--grad-reduce",
       [&](auto f, auto v) {
         if (v != "f32" && v != "bf16")
           throw UsageError(std::string(f) + ": unknown type '" + std::string(v) +
                            "'; use f32 or bf16");
         o.grad_reduce = v == "bf16" ? ls::DType::kBF16 : ls::DType::kF32;
       }},
      {"--collective-timeout-s",
       [&](auto f, auto v) { o.collective_timeout_s = parse_positive<double>(f, v); }},
      {"--heartbeat-s", [&](auto f, auto v) { o.heartbeat_s = parse_positive<double>(f, v); }},
      {"--telemetry", [&](auto, auto v) { o.telemetry_path = v; }},
      {"--telemetry-interval-s",
       [&](auto f, auto v) {
         o.telemetry_interval_s = parse_positive<double>(f, v);
         if (o.telemetry_interval_s > 86400)
           throw UsageError("--telemetry-interval-s must be at most 86400 (a day), got " +
                            std::string(v));
       }},
      {"--optimizer",
       [&](auto f, auto v) {
         if (v != "adamw" && v != "sgd")
           throw UsageError(std::string(f) + ": unknown optimizer '" + std::string(v) +
                            "'; use adamw or sgd");
         o.optimizer = v;
       }},
      {"--lr", [&](auto f, auto v) { o.lr = parse_positive<float>(f, v); }},
      {"--momentum",
       [&](auto f, auto v) {
         o.momentum = parse_number<float>(f, v);
         if (o.momentum < 0 || o.momentum >= 1) throw UsageError("--momentum must be in [0, 1)");
       }},
      {"--weight-decay",
       [&](auto f, auto v) {
         o.weight_decay = parse_number<float>(f, v);
         if (o.weight_decay < 0) throw UsageError("--weight-decay must be >= 0");
       }},
      {"--seed", [&](auto f, auto v) { o.seed = parse_number<uint64_t>(f, v); }},
      {"--host-threads", [&](auto f, auto v) { o.host_threads = parse_positive<int>(f, v); }},
      {"--log-every", [&](auto f, auto v) { o.log_every = parse_number<int64_t>(f, v); }},
      {"--json", [&](auto, auto v) { o.json_path = v; }},
      {"--checkpoint-dir", [&](auto, auto v) { o.checkpoint_dir = v; }},
      {"--checkpoint-every",
       [&](auto f, auto v) { o.checkpoint_every = parse_positive<int64_t>(f, v); }},
      {"--keep-checkpoints",
       [&](auto f, auto v) {
         o.keep_checkpoints = parse_number<int64_t>(f, v);
         if (o.keep_checkpoints < 0 || o.keep_checkpoints > 1000000)
           throw UsageError("--keep-checkpoints must be in [0, 1000000] (0 keeps all), got " +
                            std::string(v));
       }},
      {"--keep-every", [&](auto f, auto v) { o.keep_every = parse_positive<int64_t>(f, v); }},
  };
  ls::cli::parse_flags(argc, argv, setters,
                       {{"-h", [&] { o.help = true; }},
                        {"--help", [&] { o.help = true; }},
                        {"--uneven-shards", [&] { o.uneven_shards = true; }},
                        {"--no-graphs", [&] { o.graphs = false; }},
                        {"--graphs", [&] { o.graphs = true; }},
                        {"--resume", [&] { o.resume = true; }}});
  if (o.log_every < 0) throw UsageError("--log-every must be >= 0");
  const bool transformer = o.model == "gpt" || o.model == "classifier";
  if (!transformer && (!o.init.empty() || !o.export_hf.empty() || !o.tokenizer.empty())) {
    throw UsageError("--init, --export-hf and --tokenizer are for --model gpt or classifier");
  }
  if (transformer && o.hidden.size() > 1) {
    throw UsageError("--hidden takes one width (the hidden size) for --model " + o.model);
  }
  if (o.batch == 0) o.batch = transformer ? 32 : 128;
  if (o.epochs == 0 && o.steps == 0) {
    if (o.model == "gpt") {
      o.steps = 300;
    } else {
      o.epochs = o.model == "classifier" ? 3 : (o.model == "bag-of-bytes" ? 20 : 8);
    }
  }
  if ((o.resume || o.checkpoint_every > 0) && o.checkpoint_dir.empty()) {
    throw UsageError("--resume and --checkpoint-every need --checkpoint-dir");
  }
  if (o.strategy == "auto" && (o.pipeline > 0 || o.shard != ls::ShardMode::kNone)) {
    throw UsageError("--strategy auto chooses --shard and --pipeline itself; drop them");
  }
  if (o.grad_reduce == ls::DType::kBF16 && o.shard == ls::ShardMode::kGradients) {
    throw UsageError(
        "--grad-reduce bf16 does not combine with --shard gradients; use --shard "
        "optimizer or f32 reduction");
  }
  if (o.keep_every > 0 && o.checkpoint_dir.empty()) {
    throw UsageError("--keep-every needs --checkpoint-dir");
  }
  return o;
}
