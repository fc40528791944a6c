// lockstep's public header: everything an application needs to train a model data-parallel on
// every device of a machine. Only the headers below are installed; everything else is internal.
//   devices, dtypes, tensors, errors: engine/core/{device,dtype,tensor,stream,allocator,error}.h
//   mixed precision, loss scaling:    engine/core/precision.h
//   data sets and batches:            engine/model/data/{dataset,sampler}.h
//   text, tokenizers, prefetching:    engine/model/data/{text_corpus,wordnet,tokenizer,prefetch}.h
//   transformer configs:              engine/model/nn/transformer_config.h
//   Hugging Face GPT-2/BERT files:    engine/model/checkpoint/hf_transformer.h
//   Trainer, what every strategy offers (step, results, evaluate, save/load): parallel/trainer.h
//   DataParallel, model and optimizer factories, checkpoints: parallel/data_parallel.h
//   which checkpoints a directory keeps: engine/model/checkpoint/retention.h
//   writing JSON reports:             engine/core/json.h
//   processes under mpirun (rank, size, global replica numbers): parallel/world.h
#pragma once

#include "engine/core/allocator.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/json.h"
#include "engine/core/precision.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "engine/model/checkpoint/hf_transformer.h"
#include "engine/model/checkpoint/retention.h"
#include "engine/model/data/dataset.h"
#include "engine/model/data/prefetch.h"
#include "engine/model/data/sampler.h"
#include "engine/model/data/text_corpus.h"
#include "engine/model/data/tokenizer.h"
#include "engine/model/data/wordnet.h"
#include "engine/model/nn/transformer_config.h"
#include "parallel/buckets.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/planner.h"
#include "parallel/trainer.h"
#include "parallel/world.h"
