// lockstep's public header: everything an application needs to build a model and train it.
#pragma once

#include "engine/autograd.h"
#include "engine/data/dataset.h"
#include "engine/data/sampler.h"
#include "engine/device.h"
#include "engine/error.h"
#include "engine/nn/functional.h"
#include "engine/nn/module.h"
#include "engine/nn/parameter_store.h"
#include "engine/optim/optimizer.h"
#include "engine/runtime.h"
#include "engine/stream.h"
#include "engine/tensor.h"
#include "parallel/data_parallel.h"
