// The hierarchical host communicator (see parallel/mpi/mpi_host_communicator.h) and
// make_mpi_host_communicators. See Note [Hierarchical host collectives].
#include "parallel/mpi/mpi_host_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <mutex>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "parallel/comm/collective_checks.h"
#include "parallel/host/host_clique.h"
#include "parallel/host/host_reduce.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/mpi/mpi_state.h"
#include "parallel/mpi/mpi_wait.h"

namespace ls {

// Note [Hierarchical host collectives]
// A collective over P processes with L_p host devices each (N replicas in all) is one task on
// each replica's stream, with the in-process HostClique's barriers between its phases:
//   arrive      local arrival barrier + local desync check (as the host communicator)
//   1 local     local rank r works on chunk r: reductions sum (or max) the L local sends in f32,
//               local ranks 0..L-1 in order, into the process's partial; all_gather copies each
//               send to its global block of a staging buffer; broadcast's root copies its send.
//   sync
//   2 exchange  local rank 0 alone: headers (kind, dtype, count, op, root, seq) by non-blocking
//               point-to-point to every process (a process that never arrives is named, and its
//               receive cancelled), then the payload: MPI_Iallgather of the f32 partials
//               (reductions), MPI_Iallgatherv (all_gather), MPI_Ibcast (broadcast). Every wait
//               polls MPI_Testall until the deadline (now + the timeout) or a local failure
//               (abort()); a failure fails the local clique and the leader still reaches the sync.
//   sync        (the local barriers wait up to twice the timeout, so the exchange reports first)
//   3 spread    reductions: local rank r combines the P partials of its chunk in process order
//               0..P-1 and writes the result to every local recv (all_reduce), the root's recv
//               (reduce) or its own block (reduce_scatter); copies: each rank copies the staging
//               buffer into its recv. Skipped when the clique failed.
//   depart      exit barrier; then a failure is thrown on the stream.
// Summation order, fixed by the world shape: (local ranks in order) per process, then the
// processes' partials in order; kAvg divides by N at the end; bf16 is rounded once. MPI's own
// reduction order is never used. With one process this is exactly the host communicator's order.
// reduce and reduce_scatter move every partial to every process (P x the bytes of a tree or ring
// reduction): simple and deterministic, not yet the fastest.

namespace {

constexpr int kHeaderTag = 7101;
using Header = std::array<int64_t, 6>;

Header header_of(const CollectiveDesc& desc) {
  return {static_cast<int64_t>(desc.kind),
          static_cast<int64_t>(desc.dtype),
          static_cast<int64_t>(desc.count),
          static_cast<int64_t>(desc.op),
          desc.root,
          desc.seq};
}

CollectiveDesc desc_of(const Header& h) {
  CollectiveDesc desc;
  desc.kind = static_cast<CollectiveKind>(h[0]);
  desc.dtype = static_cast<DType>(h[1]);
  desc.count = static_cast<size_t>(h[2]);
  desc.op = static_cast<ReduceOp>(h[3]);
  desc.root = static_cast<int>(h[4]);
  desc.seq = h[5];
  return desc;
}

bool is_reduction(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduce ||
         kind == CollectiveKind::kReduceScatter;
}

inline float load(const void* base, size_t i, DType dtype) {
  return dtype == DType::kBF16 ? bf16_to_f32(static_cast<const uint16_t*>(base)[i])
                               : static_cast<const float*>(base)[i];
}
inline void store(void* base, size_t i, DType dtype, float x) {
  if (dtype == DType::kBF16) {
    static_cast<uint16_t*>(base)[i] = f32_to_bf16(x);
  } else {
    static_cast<float*>(base)[i] = x;
  }
}
inline float combine(ReduceOp op, float acc, float x) {
  if (op == ReduceOp::kMax) return (x > acc || x != x) ? x : acc;  // NaN wins (host_reduce.cpp)
  return acc + x;
}

struct Range {
  size_t begin;
  size_t count;
};
Range chunk_of(size_t count, int n, int k) {  // as the host communicator splits its all_reduce
  const size_t base = count / static_cast<size_t>(n);
  const size_t extra = count % static_cast<size_t>(n);
  const auto uk = static_cast<size_t>(k);
  return {uk * base + std::min(uk, extra), base + (uk < extra ? 1 : 0)};
}

}  // namespace

class ProcessClique {
 public:
  ProcessClique(const World& world, const CommunicatorOptions& options);
  ~ProcessClique();
  ProcessClique(const ProcessClique&) = delete;
  ProcessClique& operator=(const ProcessClique&) = delete;

  HostClique& local() { return local_; }
  void run(int local_rank, const CollectiveDesc& desc);
  // Whom the exchange in progress waits for: the processes whose header has not come
  // (refreshed every 100 ms), e.g. "process 1 on host-b (it has not reached this collective)",
  // or the other processes' data once every header came; "" when no exchange waits.
  std::string waiting_for() const {
    std::lock_guard lock(note_mutex_);
    return waiting_for_;
  }

 private:
  size_t reduced_count(const CollectiveDesc& desc) const {  // elements of one partial
    return desc.kind == CollectiveKind::kReduceScatter ? desc.count * static_cast<size_t>(replicas_)
                                                       : desc.count;
  }
  void reserve(const CollectiveDesc& desc);
  void gather_local(int local_rank, const CollectiveDesc& desc);
  void exchange(const CollectiveDesc& desc);
  bool exchange_headers(const CollectiveDesc& desc, mpi::Clock::time_point deadline);
  void spread(int local_rank, const CollectiveDesc& desc);
  void fail(const std::string& message, ErrorKind kind) {
    local_.fail(message, kind, __FILE__, __LINE__);
  }
  void note_missing_headers();

  const int process_;
  const int processes_;
  const int replicas_;
  const std::vector<int> counts_;
  std::vector<int> firsts_;
  const std::string where_;  // "process 0 (host-a)"
  const std::chrono::milliseconds timeout_;
  HostClique local_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool poisoned_ = false;        // an exchange was given up: comm_ is kept (never freed) but unused
  std::vector<float> partial_;   // reductions: this process's f32 partial
  std::vector<float> gathered_;  // reductions: every process's partial, process-major
  std::vector<unsigned char> bytes_;  // all_gather and broadcast staging
  std::vector<int> sizes_, displs_;   // all_gather's per-process byte counts and offsets
  std::shared_ptr<Header> header_out_ = std::make_shared<Header>();  // heap: may be buried
  std::vector<Header> headers_;
  std::vector<MPI_Request> requests_;
  std::vector<std::string> host_names_;  // of every process
  mutable std::mutex note_mutex_;
  std::string waiting_for_;  // guarded by note_mutex_
};

ProcessClique::ProcessClique(const World& world, const CommunicatorOptions& options)
    : process_(world.rank()),
      processes_(world.size()),
      replicas_(world.replicas()),
      counts_([&] {
        std::vector<int> counts;
        for (int p = 0; p < world.size(); ++p) counts.push_back(world.local_device_count(p));
        return counts;
      }()),
      where_(detail::concat("process ", world.rank(), " (", world.host_name(), ")")),
      timeout_(options.timeout),
      local_(static_cast<int>(world.local_devices().size()), 2 * options.timeout),
      headers_(static_cast<size_t>(world.size())) {
  for (int p = 0; p < processes_; ++p) {
    firsts_.push_back(world.first_replica(p));
    host_names_.push_back(world.host_name(p));
  }
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi::mpi_mutex());
    mpi::check(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "MPI_Comm_idup");
  }
  const mpi::WaitEnd end =
      mpi::wait_all(&request, 1, mpi::Clock::now() + options.timeout, [] { return false; });
  LS_CHECK_AS(ErrorKind::kTimeout, end == mpi::WaitEnd::kDone, "make_world_communicators on ",
              where_, ": the other processes did not make their communicators within ",
              options.timeout.count(), " ms; every process must call it, in the same order");
}

ProcessClique::~ProcessClique() {
  if (mpi::finalized()) return;
  std::lock_guard lock(mpi::mpi_mutex());
  if (!poisoned_) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    return;
  }
  // A given-up exchange may still write into (or read from) these buffers: they go to the
  // graveyard with their requests, kept until MPI_Finalize (mpi_state.h). Moving a vector keeps
  // its heap buffer where it is.
  struct Abandoned {
    std::vector<float> partial, gathered;
    std::vector<unsigned char> bytes;
    std::vector<int> sizes, displs;
    std::shared_ptr<Header> header_out;
    std::vector<Header> headers;
    std::vector<MPI_Request> requests;
  };
  mpi::bury(std::make_shared<Abandoned>(Abandoned{
      std::move(partial_), std::move(gathered_), std::move(bytes_), std::move(sizes_),
      std::move(displs_), std::move(header_out_), std::move(headers_), std::move(requests_)}));
}

// Local rank 0, before its arrive(): no other rank touches the buffers until arrive() releases
// it, and every rank has left the previous collective (exit barrier), so resizing is race-free.
void ProcessClique::reserve(const CollectiveDesc& desc) {
  if (is_reduction(desc.kind)) {
    const size_t m = reduced_count(desc);
    if (partial_.size() < m) partial_.resize(m);
    if (gathered_.size() < m * static_cast<size_t>(processes_)) {
      gathered_.resize(m * static_cast<size_t>(processes_));
    }
  } else {
    const size_t copies = desc.kind == CollectiveKind::kAllGather ? replicas_ : 1;
    if (bytes_.size() < desc.bytes() * copies) bytes_.resize(desc.bytes() * copies);
  }
}

void ProcessClique::run(int local_rank, const CollectiveDesc& desc) {
  if (local_rank == 0) reserve(desc);
  local_.arrive(local_rank, desc);
  gather_local(local_rank, desc);
  local_.sync(local_rank, desc, "local reduce");
  if (local_rank == 0) {
    try {
      exchange(desc);
    } catch (const Error& error) {  // a failed MPI call: the local ranks must still get through
      local_.fail(error.what(), error.kind(), __FILE__, __LINE__);
    }
  }
  local_.sync(local_rank, desc, "process exchange");
  if (!local_.failed()) spread(local_rank, desc);
  local_.depart(local_rank, desc);
  local_.throw_if_failed();
}

void ProcessClique::gather_local(int local_rank, const CollectiveDesc& desc) {
  const int n = local_.size();
  const size_t block = desc.bytes();
  const int me = firsts_[static_cast<size_t>(process_)] + local_rank;
  if (desc.kind == CollectiveKind::kAllGather) {
    host_copy(bytes_.data() + static_cast<size_t>(me) * block, desc.send, block);
  } else if (desc.kind == CollectiveKind::kBroadcast) {
    if (desc.root == me) host_copy(bytes_.data(), desc.send, block);
  } else {
    const Range mine = chunk_of(reduced_count(desc), n, local_rank);
    const ReduceOp op = desc.op == ReduceOp::kAvg ? ReduceOp::kSum : desc.op;  // divided at the end
    if (desc.dtype == DType::kF32) {  // host_reduce's order is ours: ranks 0..n-1, left to right
      const void** inputs = local_.scratch(local_rank);
      for (int k = 0; k < n; ++k) inputs[k] = local_.peer(k).send;
      host_reduce(inputs, n, mine.begin, partial_.data() + mine.begin, mine.count, DType::kF32, op);
      return;
    }
    for (size_t i = mine.begin; i < mine.begin + mine.count; ++i) {
      float acc = load(local_.peer(0).send, i, desc.dtype);
      for (int k = 1; k < n; ++k)
        acc = combine(desc.op, acc, load(local_.peer(k).send, i, desc.dtype));
      partial_[i] = acc;
    }
  }
}

// Tests each header receive on its own (a completed one becomes MPI_REQUEST_NULL, which
// MPI_Testall then counts as done) and notes the processes still awaited. Leader thread only.
void ProcessClique::note_missing_headers() {
  std::string missing;
  {
    std::lock_guard lock(mpi::mpi_mutex());
    size_t r = 0;
    for (int p = 0; p < processes_; ++p) {
      if (p == process_) continue;
      MPI_Request& recv = requests_[r];
      r += 2;
      int done = 0;
      if (recv != MPI_REQUEST_NULL)
        mpi::check(MPI_Test(&recv, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (recv != MPI_REQUEST_NULL && !done) {
        missing += detail::concat(missing.empty() ? "" : ", ", "process ", p, " on ",
                                  host_names_[static_cast<size_t>(p)]);
      }
    }
  }
  if (!missing.empty()) missing += " (not at this collective yet)";
  std::lock_guard lock(note_mutex_);
  waiting_for_ = std::move(missing);
}

bool ProcessClique::exchange_headers(const CollectiveDesc& desc, mpi::Clock::time_point deadline) {
  *header_out_ = header_of(desc);  // kept past this call: a send given up on may still read it
  const Header& mine = *header_out_;
  headers_[static_cast<size_t>(process_)] = mine;
  requests_.assign(2 * static_cast<size_t>(processes_ - 1), MPI_REQUEST_NULL);
  {
    std::lock_guard lock(mpi::mpi_mutex());
    size_t r = 0;
    for (int p = 0; p < processes_; ++p) {
      if (p == process_) continue;
      mpi::check(MPI_Irecv(headers_[static_cast<size_t>(p)].data(), 6, MPI_INT64_T, p, kHeaderTag,
                           comm_, &requests_[r++]),
                 "MPI_Irecv");
      mpi::check(MPI_Isend(mine.data(), 6, MPI_INT64_T, p, kHeaderTag, comm_, &requests_[r++]),
                 "MPI_Isend");
    }
  }
  mpi::Clock::time_point next_note = mpi::Clock::now() + std::chrono::milliseconds(100);
  const mpi::WaitEnd end = mpi::wait_all(
      requests_.data(), static_cast<int>(requests_.size()), deadline, [this, &next_note] {
        if (mpi::Clock::now() >= next_note) {  // for the watchdog: who has not come yet
          note_missing_headers();
          next_note = mpi::Clock::now() + std::chrono::milliseconds(100);
        }
        return local_.failed();
      });
  {
    std::lock_guard lock(note_mutex_);
    waiting_for_.clear();
  }
  if (end != mpi::WaitEnd::kDone) {
    // Name the processes whose header never came, and withdraw the receives (cancellable,
    // unlike a collective). Our headers may still sit unreceived at the peers: comm_ is never
    // freed (MPI would reuse its context id, and a later communicator would receive them).
    poisoned_ = true;
    std::string missing;
    {
      std::lock_guard lock(mpi::mpi_mutex());
      size_t r = 0;
      for (int p = 0; p < processes_; ++p) {
        if (p == process_) continue;
        MPI_Request& recv = requests_[r++];
        MPI_Request& send = requests_[r++];
        int done = 0;
        MPI_Test(&recv, &done, MPI_STATUS_IGNORE);
        if (!done) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(p);
          MPI_Cancel(&recv);
          MPI_Wait(&recv, MPI_STATUS_IGNORE);
        }
        if (send != MPI_REQUEST_NULL) MPI_Request_free(&send);
      }
    }
    if (end == mpi::WaitEnd::kTimeout) {
      fail(detail::concat(describe(desc), " across processes timed out after ", timeout_.count(),
                          " ms on ", where_, ": process(es) ", missing,
                          " never reached it (stuck, dead, or issued fewer collectives); raise "
                          "CommunicatorOptions::timeout if they are only slow"),
           ErrorKind::kTimeout);
    }
    return false;  // stopped: the local failure (abort) is already recorded
  }
  for (int p = 0; p < processes_; ++p) {
    if (headers_[static_cast<size_t>(p)] != mine) {
      fail(detail::concat("desync across processes: ", where_, " issued ", describe(desc),
                          " but process ", p, " issued ",
                          describe(desc_of(headers_[static_cast<size_t>(p)])),
                          "; every replica of every process must issue the same collectives in "
                          "the same order"),
           ErrorKind::kDesync);
      return false;
    }
  }
  return true;
}

void ProcessClique::exchange(const CollectiveDesc& desc) {
  const auto deadline = mpi::Clock::now() + timeout_;
  if (local_.failed() || !exchange_headers(desc, deadline) || desc.count == 0) return;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard lock(mpi::mpi_mutex());
    if (is_reduction(desc.kind)) {
      const size_t m = reduced_count(desc);
      mpi::check(MPI_Iallgather(partial_.data(), static_cast<int>(m), MPI_FLOAT, gathered_.data(),
                                static_cast<int>(m), MPI_FLOAT, comm_, &request),
                 "MPI_Iallgather");
    } else if (desc.kind == CollectiveKind::kAllGather) {
      // Bytes of each process's blocks, and where they go: members, as MPI may read them until
      // the collective completes.
      sizes_.clear();
      displs_.clear();
      for (int p = 0; p < processes_; ++p) {
        sizes_.push_back(static_cast<int>(desc.bytes() * static_cast<size_t>(counts_[p])));
        displs_.push_back(static_cast<int>(desc.bytes() * static_cast<size_t>(firsts_[p])));
      }
      mpi::check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bytes_.data(), sizes_.data(),
                                 displs_.data(), MPI_BYTE, comm_, &request),
                 "MPI_Iallgatherv");
    } else {
      int root_process = 0;
      while (root_process + 1 < processes_ && firsts_[root_process + 1] <= desc.root)
        ++root_process;
      mpi::check(MPI_Ibcast(bytes_.data(), static_cast<int>(desc.bytes()), MPI_BYTE, root_process,
                            comm_, &request),
                 "MPI_Ibcast");
    }
  }
  {
    std::lock_guard lock(note_mutex_);
    waiting_for_ = "the other processes' data (every process reached this collective)";
  }
  const mpi::WaitEnd end = mpi::wait_all(&request, 1, deadline, [this] { return local_.failed(); });
  {
    std::lock_guard lock(note_mutex_);
    waiting_for_.clear();
  }
  if (end == mpi::WaitEnd::kDone) return;
  poisoned_ = true;  // a started collective cannot be cancelled: this communicator is done
  if (end == mpi::WaitEnd::kTimeout) {
    fail(detail::concat(describe(desc), " across processes timed out after ", timeout_.count(),
                        " ms on ", where_,
                        " while exchanging data: a process stopped in the "
                        "middle of the collective (killed, or its thread died)"),
         ErrorKind::kTimeout);
  }
}

void ProcessClique::spread(int local_rank, const CollectiveDesc& desc) {
  const int n = local_.size();
  const int first = firsts_[static_cast<size_t>(process_)];
  if (desc.kind == CollectiveKind::kAllGather) {
    host_copy(local_.peer(local_rank).recv, bytes_.data(), desc.bytes() * replicas_);
    return;
  }
  if (desc.kind == CollectiveKind::kBroadcast) {
    host_copy(local_.peer(local_rank).recv, bytes_.data(), desc.bytes());
    return;
  }
  const size_t m = reduced_count(desc);
  size_t begin = 0;  // element of the reduced vector where this rank starts, and how many
  Range range{0, 0};
  std::vector<void*> outputs;  // where element `begin` goes, one per receiving buffer
  if (desc.kind == CollectiveKind::kReduceScatter) {
    range = {static_cast<size_t>(first + local_rank) * desc.count, desc.count};
    outputs.push_back(local_.peer(local_rank).recv);
  } else {
    range = chunk_of(desc.count, n, local_rank);
    const size_t at = range.begin * dtype_size(desc.dtype);
    if (desc.kind == CollectiveKind::kAllReduce) {
      for (int k = 0; k < n; ++k) outputs.push_back(static_cast<char*>(local_.peer(k).recv) + at);
    } else if (desc.root >= first && desc.root < first + n) {
      outputs.push_back(static_cast<char*>(local_.peer(desc.root - first).recv) + at);
    }
  }
  begin = range.begin;
  const float divisor = static_cast<float>(replicas_);
  if (desc.dtype == DType::kF32 && !outputs.empty()) {
    // The same order (processes 0..P-1, left to right) through host_reduce's vectorised loops.
    thread_local std::vector<const void*> inputs;
    inputs.resize(static_cast<size_t>(processes_));
    for (int p = 0; p < processes_; ++p) inputs[p] = gathered_.data() + static_cast<size_t>(p) * m;
    const ReduceOp op = desc.op == ReduceOp::kAvg ? ReduceOp::kSum : desc.op;
    host_reduce_to_all(inputs.data(), processes_, outputs.data(), static_cast<int>(outputs.size()),
                       begin, range.count, DType::kF32, op);
    if (desc.op == ReduceOp::kAvg) {
      for (void* out : outputs) {
        float* x = static_cast<float*>(out);
        for (size_t i = 0; i < range.count; ++i) x[i] /= divisor;
      }
    }
    return;
  }
  for (size_t i = 0; i < range.count; ++i) {
    float acc = gathered_[begin + i];
    for (int p = 1; p < processes_; ++p) {
      acc = combine(desc.op, acc, gathered_[static_cast<size_t>(p) * m + begin + i]);
    }
    if (desc.op == ReduceOp::kAvg) acc /= divisor;
    for (void* out : outputs) store(out, i, desc.dtype, acc);
  }
}

MpiHostCommunicator::MpiHostCommunicator(std::shared_ptr<ProcessClique> clique, int local_rank,
                                         int global_rank, int global_size, Device device)
    : clique_(std::move(clique)),
      local_rank_(local_rank),
      global_rank_(global_rank),
      global_size_(global_size),
      device_(device) {}

void MpiHostCommunicator::issue(CollectiveDesc desc, Stream& stream) {
  check_collective(desc, global_rank_, global_size_, device_, stream);
  // MPI counts are ints: f32 elements of the partial (reductions), bytes (the copies).
  const size_t replicas = static_cast<size_t>(global_size_);
  const size_t mpi_count = desc.kind == CollectiveKind::kReduceScatter ? desc.count * replicas
                           : is_reduction(desc.kind)                   ? desc.count
                           : desc.kind == CollectiveKind::kAllGather   ? desc.bytes() * replicas
                                                                       : desc.bytes();
  LS_CHECK(mpi_count <= INT_MAX, describe(desc), " across processes moves ", mpi_count,
           " MPI elements in one call, more than MPI's int count allows; split it into pieces "
           "under 2^31 elements (f32 partials) or bytes");
  HostClique& local = clique_->local();
  local.throw_if_failed();  // sticky, as the host communicator
  desc.seq = local.note_issued(local_rank_);
  host_enqueue(stream, [clique = clique_, rank = local_rank_, desc = std::move(desc)] {
    clique->run(rank, desc);
  });
}

void MpiHostCommunicator::group_end() {
  LS_CHECK(group_depth_ > 0, "group_end() on rank ", global_rank_,
           " without a matching group_start(); calls to group_start()/group_end() must balance");
  --group_depth_;
}

void MpiHostCommunicator::abort() {
  clique_->local().fail("collective aborted: abort() was called on the communicator of rank " +
                            std::to_string(global_rank_),
                        ErrorKind::kAborted, __FILE__, __LINE__);
}

std::string MpiHostCommunicator::waiting_for() const { return clique_->waiting_for(); }

std::vector<std::unique_ptr<Communicator>> make_mpi_host_communicators(
    const World& world, const CommunicatorOptions& options) {
  check_clique_devices(world.local_devices(), options, "make_mpi_host_communicators",
                       DeviceKind::kHost);
  auto clique = std::make_shared<ProcessClique>(world, options);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (size_t i = 0; i < world.local_devices().size(); ++i) {
    const int local = static_cast<int>(i);
    comms.push_back(std::make_unique<MpiHostCommunicator>(
        clique, local, world.global_replica(local), world.replicas(), world.local_devices()[i]));
  }
  return comms;
}

}  // namespace ls
