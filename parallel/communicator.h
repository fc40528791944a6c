// Communicator: collectives across the replicas of one process, with NCCL's semantics.
//
// One Communicator per rank (device), all made together by make_communicators(). Each call is
// enqueued on the stream it is given and returns at once; the data moves when the stream gets
// there. Arguments follow NCCL: (send, recv, count, dtype, [op], [root], stream). send == recv is
// in place (for reduce_scatter: recv == send + rank * recv_count; for all_gather:
// send == recv + rank * send_count). f32 and bf16; bf16 is reduced in f32 and rounded once.
// Every rank must issue the same collectives in the same order with the same counts, dtypes and
// roots; the host communicator checks this (desync) and raises an error naming both sides
// instead of hanging or corrupting memory.
// group_start()/group_end() bracket calls that may be fused (NCCL launches them together).
// abort() ends every pending and future collective of the whole clique with an error.
// Thread-safety: a Communicator is used by its replica's thread only; abort() from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/stream.h"

namespace ls {

enum class ReduceOp { kSum, kAvg, kMax };
std::string_view reduce_op_name(ReduceOp op);

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast };
std::string_view collective_name(CollectiveKind kind);

struct CommunicatorOptions {
  // How long a rank may wait for its peers in one collective before the clique is aborted with
  // an error that says which ranks never arrived. Tests use about a second.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Device device() const = 0;
  virtual std::string backend() const = 0;  // "host" or "nccl"

  virtual void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                          Stream& stream) = 0;
  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype,
                              ReduceOp op, Stream& stream) = 0;
  // recv holds size() * send_count elements; block r comes from rank r.
  virtual void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                          Stream& stream) = 0;
  // recv of every rank receives root's send (send is read on root only).
  virtual void broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                         Stream& stream) = 0;

  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void abort() = 0;

  // Names the next collective in diagnostics ("bucket 3", "loss"): backends ignore it, the
  // flight recorder keeps it, decorators pass it on.
  virtual void label_next(std::string /*label*/) {}
};

// Makes one communicator per device, together (host devices: the in-process host clique;
// CUDA devices: one NCCL communicator each, initialised in one group). Mixed kinds are an error.
std::vector<std::unique_ptr<Communicator>> make_communicators(const std::vector<Device>& devices,
                                                              const CommunicatorOptions& options = {});

// Backend factories (parallel/host/, parallel/nccl/ or parallel/no_nccl/).
std::vector<std::unique_ptr<Communicator>> make_host_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options);
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options);

}  // namespace ls
