// The memory loops of the host collectives: an in-order reduction over the ranks' buffers and a
// parallel copy. Called from inside host stream work; both split large ranges with
// host_parallel_for over the current host device's cores.
//
// host_reduce: out[i] = in[0][offset + i] (op) in[1][offset + i] (op) ... in[n-1][offset + i] for
// i in [0, count), accumulated in f32 left to right (ranks 0..n-1), so the result is bitwise the
// same for the same inputs whatever the timing or the split. kAvg is that f32 sum divided by n;
// bf16 is widened to f32, reduced, and rounded to bf16 once. kMax propagates NaN.
// In place: out may be in[k] + offset for any k; each element is read from every input before
// it is written.
#pragma once

#include <cstddef>

#include "parallel/comm/communicator.h"

namespace ls {

void host_reduce(const void* const* inputs, int n, size_t offset, void* out, size_t count,
                 DType dtype, ReduceOp op);

// The same reduction of elements [offset, offset + count) of the inputs, written to
// outputs[o][0, count) for every o in [0, n_out): the one-phase all-reduce, where rank r reduces
// chunk r and delivers it to every rank (outputs[o] = rank o's recv + offset). In place
// (outputs[o] == inputs[o] + offset) is fine for the same reason as above.
void host_reduce_to_all(const void* const* inputs, int n, void* const* outputs, int n_out,
                        size_t offset, size_t count, DType dtype, ReduceOp op);

// memcpy split across the device's cores when large; no-op when dst == src or bytes == 0.
void host_copy(void* dst, const void* src, size_t bytes);

}  // namespace ls
