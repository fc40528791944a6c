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
// group_start()/group_end() bracket calls that may be fused (NCCL launches them together, at
// the outermost group_end(); the host communicator enqueues them there too).
// abort() ends every pending and future collective of the whole clique with an error. It never
// blocks: not on a peer, not on a lock held by a rank's thread, and not on a CUDA graph that
// captured the clique's collectives (NCCL's ncclCommAbort can wait for those to be destroyed,
// so the NCCL clique runs it on a helper thread joined at its teardown).
// Thread-safety: a Communicator is used by its replica's thread only; abort() from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/dtype.h>
#include <lockstep/stream.h>
#include "parallel/comm/collective.h"

namespace ls {

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
  // root's recv receives the reduction of every rank's send (recv is written on root only).
  virtual void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                      int root, Stream& stream) = 0;

  virtual void group_start() = 0;
  virtual void group_end() = 0;
  virtual void abort() = 0;

  // Names the next collective in diagnostics ("bucket 3", "loss"): backends ignore it, the
  // flight recorder keeps it, decorators pass it on.
  virtual void label_next(std::string /*label*/) {}
  // Who the collective this rank waits in has not heard from yet, when the backend can tell
  // (across processes: "process 1 on host-b"); "" otherwise. For the watchdog's report; any
  // thread may call it.
  virtual std::string waiting_for() const { return ""; }
};

// A Communicator whose five collectives are one: each builds its CollectiveDesc (seq 0, no
// label) and hands it to issue(). The backends and the decorators (RecordingCommunicator) derive
// from it, so every collective takes one path through each of them.
class DescribedCommunicator : public Communicator {
 public:
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  Stream& stream) final {
    issue(CollectiveDesc::all_reduce(send, recv, count, dtype, op), stream);
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                      Stream& stream) final {
    issue(CollectiveDesc::reduce_scatter(send, recv, recv_count, dtype, op), stream);
  }
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                  Stream& stream) final {
    issue(CollectiveDesc::all_gather(send, recv, send_count, dtype), stream);
  }
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                 Stream& stream) final {
    issue(CollectiveDesc::broadcast(send, recv, count, dtype, root), stream);
  }
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root,
              Stream& stream) final {
    issue(CollectiveDesc::reduce(send, recv, count, dtype, op, root), stream);
  }

 protected:
  // Enqueues the collective `desc` describes on `stream` (same contract as the five above).
  virtual void issue(CollectiveDesc desc, Stream& stream) = 0;
};

// Calls the collective `desc` describes on `comm`, through the method of its kind: how a
// decorator hands a call on to the communicator it wraps.
void issue_collective(Communicator& comm, const CollectiveDesc& desc, Stream& stream);

// A communicator around another one (the flight recorder; test fault injectors): everything is
// passed on to `inner`; a decorator overrides issue() (and label_next) to do its part.
class CommunicatorDecorator : public DescribedCommunicator {
 public:
  explicit CommunicatorDecorator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Device device() const override { return inner_->device(); }
  std::string backend() const override { return inner_->backend(); }
  void group_start() override { inner_->group_start(); }
  void group_end() override { inner_->group_end(); }
  void abort() override { inner_->abort(); }
  void label_next(std::string label) override { inner_->label_next(std::move(label)); }
  std::string waiting_for() const override { return inner_->waiting_for(); }

 protected:
  void issue(CollectiveDesc desc, Stream& stream) override {
    issue_collective(*inner_, desc, stream);
  }
  Communicator& inner() { return *inner_; }

 private:
  std::unique_ptr<Communicator> inner_;
};

// The rules for the devices of one clique, checked before anything is made (so a bad list fails
// alike with and without a GPU): at least one device, valid indices, each device once, one kind
// for all (`kind` when given: the backend's), and a positive timeout. `who` starts each message.
void check_clique_devices(const std::vector<Device>& devices, const CommunicatorOptions& options,
                          std::string_view who, std::optional<DeviceKind> kind = std::nullopt);

// Makes one communicator per device, together (host devices: the in-process host clique;
// CUDA devices: one NCCL communicator each, initialised in one group). Mixed kinds are an error.
std::vector<std::unique_ptr<Communicator>> make_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options = {});

// Backend factories (parallel/host/; parallel/nccl/, or its without_nccl.cpp in a build without
// CUDA).
std::vector<std::unique_ptr<Communicator>> make_host_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options);
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options);

}  // namespace ls
