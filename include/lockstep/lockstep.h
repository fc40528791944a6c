// lockstep's public header: everything an application needs to train a model on every device
// of a machine. The public headers are exactly the files of include/lockstep/ (installed as they
// are); everything else is internal.
//   devices, dtypes, tensors, streams, errors:
//                                     <lockstep/{device,dtype,tensor,stream,allocator,error}.h>
//   mixed precision, loss scaling:    <lockstep/precision.h>
//   data sets and batches, named inputs of any dtype:
//                                     <lockstep/data/{dataset,sampler,named_input}.h>
//   text, tokenizers, prefetching:    <lockstep/data/{text_corpus,wordnet,tokenizer,prefetch}.h>
//   writing a model: Module, parameters, autograd, the differentiable ops:
//                     <lockstep/nn/{module,inputs,parameter,autograd,functional,pooling}.h>
//   losses and their contract (cross-entropy, mse, bce_with_logits, your own): <lockstep/nn/loss.h>
//   transformer configs:              <lockstep/transformer_config.h>
//   Hugging Face GPT-2/BERT files:    <lockstep/hf_transformer.h>
//   Trainer, what every strategy offers (step, results, evaluate, save/load): <lockstep/trainer.h>
//   DataParallel, model and optimizer factories, checkpoints: <lockstep/data_parallel.h>
//   Pipeline and its schedules:       <lockstep/{pipeline,pipeline_schedule}.h>
//   gradient buckets:                 <lockstep/buckets.h>
//   which strategy fits (the planner): <lockstep/planner.h>
//   which checkpoints a directory keeps: <lockstep/checkpoint_retention.h>
//   writing JSON reports:             <lockstep/json.h>
//   how each device was used, the verdict: <lockstep/device_use.h>
//   the clock of traces and trace spans (Trainer::trace_span): <lockstep/clock.h>
//   processes under mpirun (rank, size, global replica numbers): <lockstep/world.h>
#pragma once

#include <lockstep/allocator.h>
#include <lockstep/clock.h>
#include <lockstep/device.h>
#include <lockstep/dtype.h>
#include <lockstep/error.h>
#include <lockstep/json.h>
#include <lockstep/precision.h>
#include <lockstep/stream.h>
#include <lockstep/tensor.h>
#include <lockstep/hf_transformer.h>
#include <lockstep/checkpoint_retention.h>
#include <lockstep/data/dataset.h>
#include <lockstep/data/named_input.h>
#include <lockstep/data/prefetch.h>
#include <lockstep/data/sampler.h>
#include <lockstep/data/text_corpus.h>
#include <lockstep/data/tokenizer.h>
#include <lockstep/data/wordnet.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include <lockstep/nn/inputs.h>
#include <lockstep/nn/loss.h>
#include <lockstep/nn/module.h>
#include <lockstep/nn/parameter.h>
#include <lockstep/nn/pooling.h>
#include <lockstep/transformer_config.h>
#include <lockstep/buckets.h>
#include <lockstep/data_parallel.h>
#include <lockstep/device_use.h>
#include <lockstep/pipeline.h>
#include <lockstep/planner.h>
#include <lockstep/trainer.h>
#include <lockstep/world.h>
