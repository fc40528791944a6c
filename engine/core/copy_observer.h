// A hook for the step ledger (ops/op_ledger.h, a layer above): while it records, it is told of
// every copy between two tensors of one device (Tensor::copy_from), which a GPU runs as a copy
// kernel (a gradient handed to both inputs of an add, for one). Set and read from any thread.
#pragma once

#include <cstddef>

namespace ls::detail {

using CopyObserver = void (*)(size_t bytes);
void set_copy_observer(CopyObserver observer);  // null: nobody is told
void note_device_copy(size_t bytes);            // tells the observer, if there is one

}  // namespace ls::detail
