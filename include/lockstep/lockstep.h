// lockstep's public header: everything an application needs to build a model and train it.
#pragma once

#include "engine/model/autograd.h"
#include "engine/model/data/dataset.h"
#include "engine/model/data/sampler.h"
#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/model/nn/functional.h"
#include "engine/model/nn/module.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/optim/optimizer.h"
#include "engine/core/runtime.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"
#include "parallel/data_parallel.h"
