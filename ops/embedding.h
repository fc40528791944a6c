// Embedding lookup and its gradient: f32 table [vocab, dim], i32 ids of any shape (n elements),
// f32 rows [n, dim]. Kernels: ops/host/embedding.cpp, ops/cuda/embedding.cu.
//
// embedding:          out[i, :] = table[ids[i], :]
// embedding_backward: dtable[ids[i], :] += dy[i, :], always accumulating; for each table row the
//                     contributions are added one by one in increasing i (bitwise the same on
//                     every run and on both backends).
// Shapes are checked at the call; ids are read on the device, so an id outside [0, vocab) is an
// error raised by the stream at its next synchronize()/check(), as for a bad label of
// ops/softmax_xent.h (CUDA through the stream's DeviceFault). Asynchronous in stream order.
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

// The hint of the out-of-range id message, shared by both backends.
inline constexpr const char* kEmbeddingIdHint =
    "token ids must be below the number of rows of the embedding table (the vocabulary size)";

struct EmbeddingOps {
  // out[i, :] = table[ids[i], :] for i in [0, n); an id outside [0, vocab) is raised by the
  // stream (its out row is NaN on CUDA meanwhile, unwritten on the host).
  void (*embedding)(const float* table, const int32_t* ids, int64_t n, int64_t vocab, int64_t dim,
                    float* out, Stream& stream) = nullptr;
  // dtable[ids[i], :] += dy[i, :], per table row in increasing i; bad ids as above (skipped).
  void (*embedding_backward)(const float* dy, const int32_t* ids, int64_t n, int64_t vocab,
                             int64_t dim, float* dtable, Stream& stream) = nullptr;
};

namespace detail {
// table (or dtable) f32 [vocab, dim], ids i32 of n elements, rows (out or dy) f32 [n, dim].
inline void check_embedding(const char* op, const char* table_name, const Tensor& table,
                            const Tensor& ids, const char* rows_name, const Tensor& rows,
                            const Stream& stream) {
  op_check::tensor(op, table_name, table, DType::kF32, stream);
  op_check::tensor(op, "ids", ids, DType::kI32, stream);
  op_check::tensor(op, rows_name, rows, DType::kF32, stream);
  LS_CHECK(table.ndim() == 2 && table.dim(0) > 0 && table.dim(1) > 0, op, ": ", table_name, " is ",
           table.describe(), "; expected a non-empty 2-D [vocab, dim] tensor");
  LS_CHECK(rows.ndim() == 2 && rows.dim(0) == ids.numel() && rows.dim(1) == table.dim(1), op, ": ",
           rows_name, " is ", rows.describe(), "; expected [", ids.numel(), ", ", table.dim(1),
           "], one row of ", table_name, " (", table.describe(), ") per id (ids is ",
           ids.describe(), "); reshape it to [-1, dim]");
}
}  // namespace detail

inline void embedding(const Tensor& table, const Tensor& ids, const Tensor& out, Stream& stream) {
  detail::check_embedding("embedding", "table", table, ids, "out", out, stream);
  op_entry(&EmbeddingOps::embedding, "embedding", stream, [&] {
    return OpLaunches{ledger::moves("embedding_kernel", {&ids, &out, &out})};
  })(table.f32(), ids.i32(), ids.numel(), table.dim(0), table.dim(1), out.f32(), stream);
}

// Always accumulates into dtable: zero it first for a plain gradient.
inline void embedding_backward(const Tensor& dy, const Tensor& ids, const Tensor& dtable,
                               Stream& stream) {
  detail::check_embedding("embedding_backward", "dtable", dtable, ids, "dy", dy, stream);
  LS_CHECK(!op_check::overlaps(dy, dtable), "embedding_backward: dy (", dy.describe(),
           ") and dtable (", dtable.describe(), ") share memory; pass separate buffers");
  op_entry(&EmbeddingOps::embedding_backward, "embedding_backward", stream, [&] {
    // Sorts (id, position) keys (tiles, then merge passes), links each position to the next of
    // its id, then walks each chain per column (ops/cuda/embedding.cu): the last reads dy and
    // the table rows it adds to, once.
    const int64_t n = ids.numel(), tiles = (n + 1023) / 1024, count = tiles * 1024;
    const double key_bytes = 8.0 * static_cast<double>(count);
    OpLaunches launches{
        ledger::elementwise("embedding_sort_tiles_kernel", n, ledger::bytes(ids) + key_bytes)};
    for (int64_t run = 1024; run < count; run *= 2) {
      launches.push_back(ledger::elementwise("embedding_merge_kernel", count, 2 * key_bytes));
    }
    launches.push_back(ledger::moves("embedding_links_kernel", {&ids, &ids, &ids}));
    launches.back().bytes = key_bytes + 2.0 * ledger::bytes(ids);
    launches.push_back(ledger::moves("embedding_chains_kernel", {&ids, &dy, &dy, &dy}));
    return launches;
  })(dy.f32(), ids.i32(), ids.numel(), dtable.dim(0), dtable.dim(1), dtable.f32(), stream);
}

}  // namespace ls
