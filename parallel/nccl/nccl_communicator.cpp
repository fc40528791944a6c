// NcclClique (the NCCL communicators of one process, made, aborted and torn down together),
// NcclCommunicator (parallel/nccl/nccl_communicator.h) and make_nccl_clique (nccl_clique.h); the
// factories, which choose the ranks and share the NCCL id, are in nccl_factories.cpp.
// NCCL semantics relied on here were read in NVIDIA/nccl src/init.cc and src/group.cc and the
// NCCL user guide; see docs/gpu.md, section "NCCL communicator".
//
// Note [NCCL init is the barrier]
// make_nccl_communicators runs on one thread: ncclGetUniqueId, ncclGroupStart, for every rank
// cudaSetDevice + ncclCommInitRankConfig(blocking = 0), ncclGroupEnd (ncclInProgress for
// non-blocking communicators), then ncclCommGetAsyncError on every rank until none is
// ncclInProgress. It returns only when every rank is fully initialised, and replica threads get
// their communicator only from its result, so no rank can issue a collective while a peer is still
// initialising. That is the barrier after init that NVIDIA/nccl PR #623 and jax #11637 call for.
// Across processes (make_nccl_world_communicators) each process does the same for its own ranks,
// with process 0's id: NCCL's bootstrap joins every rank of every process before any is ready,
// so the barrier spans the world (and a process that never arrives shows as a timeout here).
//
// Note [NCCL polling]
// A non-blocking communicator may answer any call with ncclInProgress; until
// ncclCommGetAsyncError says ncclSuccess no other call may use it. Every wait here polls (spin
// 100 us, then 20 us sleeps, then 1 ms sleeps), is bounded by the options' timeout (which then
// aborts the clique) and ends at once when the clique is aborted. Every NCCL call on a rank's
// communicator, polls included, holds that rank's mutex, and abort takes the mutex before
// ncclCommAbort: NCCL does not allow a communicator to be aborted while another thread is inside
// a call on it. A non-blocking call returns quickly, so a rank's thread holds the mutex only
// briefly. The abort may hold it long (Note [NCCL abort waits for graphs]), so a rank's thread
// takes it with try_lock and gives up, with the abort's error, once the clique is aborted.
//
// Note [NCCL abort waits for graphs]
// A CUDA graph that captured a collective holds a persistent reference on its communicator, and
// ncclCommAbort (like ncclCommDestroy) spins until every such graph is destroyed (NCCL
// src/init.cc, commDestroySync: `while (comm->localPersistentRefs != 0)`; pytorch#115388). The
// graphs belong to the replicas' threads, which destroy them only after the failure has reached
// the caller. So abort_all never calls ncclCommAbort itself: it marks the clique aborted (every
// poll and call then throws at once) and starts one helper thread that aborts the ranks, holding
// no lock of anyone else's; ncclCommAbort sets NCCL's abort flag first, so kernels in flight
// exit at once even while the helper waits for the graphs. The clique joins the helper when its
// last communicator goes, which is after every replica destroyed its graph
// (parallel/data_parallel/replica.cpp, Note [Graphs go before their communicator]).
//
// Note [NCCL groups and abort]
// NCCL groups are per thread: ncclGroupStart only counts, and calls inside a group queue their
// communicator in the thread's group until the outermost ncclGroupEnd. A group may span several
// communicators (of this or another clique); it must then be issued by one thread. Aborting a
// communicator that sits in another thread's open group would leave that group holding a dead
// communicator, so abort_all defers such ranks: the group's thread aborts them itself when the
// group closes or when its next call finds the clique aborted. A thread closes its own open group
// (ncclGroupEnd at every level) before it aborts anything, because NCCL runs ncclCommAbort as a
// job of the calling thread's group. t_group tracks what lockstep opened on each thread.
//
// Note [NCCL teardown]
// Recent NCCL finalizes the communicators of one process with an intra-node barrier, so they must
// be finalized together, not one by one as each NcclCommunicator goes: the clique does it when the
// last one goes. Non-blocking: ncclCommFinalize on every rank (each returns ncclInProgress), poll
// all of them (bounded), then ncclCommDestroy each. On error or timeout, and after an abort, the
// remaining communicators are aborted instead (ncclCommDestroy could block on stuck work).
// Across processes the clique is still this process's ranks: NCCL reclaims the communicators of
// one process together (src/init.cc, commReclaim counts intraRanks, the ranks in this process).
// But NCCL's maintainers say recent versions may need every rank of a NODE to abort before any
// abort returns (NVIDIA/nccl#863; PyTorch re-added aborting every intra-node rank for NCCL >
// 2.19, pytorch#118692): with several processes on one node, an abort can wait for the other
// processes' ranks. lockstep's failure notices make every process abort together, and the
// programs end the job (MPI_Abort) on an error; a node-mate that is dead is the untested case
// (compiled, not run on a GPU).
#include "parallel/nccl/nccl_communicator.h"

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "engine/core/cuda/cuda_runtime.h"
#include "engine/core/cuda/cuda_stream_access.h"
#include "engine/core/runtime.h"
#include <lockstep/device.h>
#include <lockstep/error.h>
#include "parallel/comm/collective.h"
#include "parallel/comm/collective_checks.h"
#include "parallel/nccl/nccl_clique.h"
#include "parallel/nccl/nccl_types.h"

namespace ls {

class NcclClique;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using detail::concat;

// See Note [NCCL polling].
void pause_since(Clock::time_point start) {
  const auto waited = Clock::now() - start;
  if (waited < 100us) {
    std::this_thread::yield();
  } else if (waited < 10ms) {
    std::this_thread::sleep_for(20us);
  } else {
    std::this_thread::sleep_for(1ms);
  }
}

// The call a wait or an error message names: a collective (its one descriptor) or a group call.
struct NcclCall {
  NcclCall(const CollectiveDesc& desc) : collective(&desc) {}  // NOLINT: implicit by design
  NcclCall(const char* group) : group_call(group) {}           // NOLINT: "group_start"
  std::string str() const { return collective != nullptr ? describe(*collective) : group_call; }
  const CollectiveDesc* collective = nullptr;
  const char* group_call = "";
};

// Why making or tearing down the clique failed ("" while nothing did), and the kind to throw.
struct Failure {
  std::string text;
  ErrorKind kind = ErrorKind::kInternal;  // a failed NCCL call, or kTimeout
  bool empty() const { return text.empty(); }
};

// The NCCL group lockstep opened on this thread. See Note [NCCL groups and abort].
struct GroupMember {
  std::weak_ptr<NcclClique> clique;
  const NcclClique* raw;  // recognises the members of a clique that is being destroyed
  int rank;
};
struct ThreadGroup {
  int depth = 0;  // ncclGroupStart calls not yet ended
  std::vector<GroupMember> members;
};
thread_local ThreadGroup t_group;

void release_thread_group();
void close_thread_group();
bool thread_group_has_aborted_member();

}  // namespace

class NcclClique : public std::enable_shared_from_this<NcclClique> {
 public:
  // Makes and initialises one communicator per device, as NCCL ranks ranks.first.. of
  // ranks.nranks; see Note [NCCL init is the barrier]. Below, `rank` is always the LOCAL index
  // (0..local_count()-1) into this process's devices; messages name the NCCL rank (where()).
  NcclClique(const std::vector<Device>& devices, const NcclRanks& ranks,
             std::chrono::milliseconds timeout);
  ~NcclClique();  // See Note [NCCL teardown].
  NcclClique(const NcclClique&) = delete;
  NcclClique& operator=(const NcclClique&) = delete;

  int local_count() const { return n_; }
  int nranks() const { return ranks_.nranks; }
  int first_rank() const { return ranks_.first; }
  Device device(int rank) const { return slots_[static_cast<size_t>(rank)].device; }
  bool nonblocking() const { return nonblocking_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  std::string abort_reason() const {
    std::lock_guard lock(reason_mutex_);
    return reason_;
  }

  // Issues `call(comm, cuda_stream)` on rank's communicator and waits until NCCL has taken it.
  template <typename Call>
  void collective(int rank, const CollectiveDesc& desc, Stream& stream, Call&& call);
  void group_start(int rank);
  void group_end(int rank);
  // Marks the clique aborted and starts the helper that aborts every communicator, once; never
  // throws and never blocks. See Note [NCCL abort waits for graphs].
  void abort_all(const std::string& reason) noexcept;
  // This thread's group closed: rank's communicator left it (the helper aborts it if needed).
  void leave_group(int rank) noexcept;
  // Polls rank's communicator until it is no longer ncclInProgress. See Note [NCCL polling].
  void wait_ready(int rank, const NcclCall& op, Clock::time_point start);

 private:
  struct Slot {
    Device device;
    std::mutex mutex;           // held around every NCCL call on comm
    ncclComm_t comm = nullptr;  // null once aborted or destroyed
    bool in_group = false;      // comm sits in the open NCCL group of group_thread
    std::thread::id group_thread;
  };

  Slot& slot(int rank) { return slots_[static_cast<size_t>(rank)]; }
  // "rank 3 (cuda:1)", and in a World " of process 1 of 2 on host-a (...)" after it.
  std::string where(int rank) const {
    return concat("rank ", ranks_.first + rank, " (", device(rank).str(), ")", of_process());
  }
  std::string of_process() const { return ranks_.process.empty() ? "" : " of " + ranks_.process; }
  std::string devices_string() const;  // "cuda:0,cuda:1" (+ of_process())
  Failure init();
  Failure wait_all(const char* what, const char* hint);
  bool finalize_all() noexcept;
  void join_group_locked(Slot& slot, int rank, bool check_only = false);
  void abort_slot_locked(Slot& slot) noexcept;
  // The helper thread's work: ncclCommAbort on every rank, each once it is in no other thread's
  // open group (or the clique is being torn down).
  void abort_slots() noexcept;
  // rank's mutex, taken with try_lock: throws the abort's error once the clique is aborted.
  std::unique_lock<std::mutex> lock_or_fail(int rank, const NcclCall& op);
  [[noreturn]] void fail_aborted(int rank, const NcclCall& op);
  [[noreturn]] void fail_nccl(int rank, const NcclCall& op, const std::string& text);

  int n_;  // local ranks
  NcclRanks ranks_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Slot[]> slots_;
  ncclConfig_t config_ = NCCL_CONFIG_INITIALIZER;
  bool nonblocking_ = true;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> tearing_down_{false};
  std::once_flag abort_once_;
  std::thread aborter_;  // See Note [NCCL abort waits for graphs].
  mutable std::mutex reason_mutex_;
  std::string reason_;
};

namespace {

void release_thread_group() {
  std::vector<GroupMember> members;
  members.swap(t_group.members);
  for (const GroupMember& member : members) {
    if (auto clique = member.clique.lock()) clique->leave_group(member.rank);
  }
}

// Ends this thread's open group at every level so that an abort can get through; NCCL launches
// whatever the group held. Results are ignored: this runs on the way to an error.
void close_thread_group() {
  while (t_group.depth > 0) {
    --t_group.depth;
    (void)ncclGroupEnd();
  }
  release_thread_group();
}

bool thread_group_has_aborted_member() {
  for (const GroupMember& member : t_group.members) {
    if (auto clique = member.clique.lock(); clique && clique->aborted()) return true;
  }
  return false;
}

}  // namespace

NcclClique::NcclClique(const std::vector<Device>& devices, const NcclRanks& ranks,
                       std::chrono::milliseconds timeout)
    : n_(static_cast<int>(devices.size())),
      ranks_(ranks),
      timeout_(timeout),
      slots_(std::make_unique<Slot[]>(devices.size())) {
  // Inside an open group our ncclGroupEnd would only count down, and nothing would initialise.
  LS_CHECK(t_group.depth == 0, "cannot make NCCL communicators while this thread has an open "
           "group (group_start() without group_end())");
  LS_ASSERT(ranks_.first >= 0 && ranks_.first + n_ <= ranks_.nranks, "NCCL ranks ", ranks_.first,
            "..", ranks_.first + n_ - 1, " are not within 0..", ranks_.nranks - 1);
  for (int r = 0; r < n_; ++r) slot(r).device = devices[static_cast<size_t>(r)];
  config_.blocking = 0;
  Failure failure = init();
  if (failure.empty()) {
    failure = wait_all(
        "initialisation",
        ranks_.process.empty()
            ? "rerun with NCCL_DEBUG=INFO to see where it stops; if peer-to-peer access between "
              "these GPUs is broken (IOMMU, PCIe ACS, some consumer GPUs), NCCL_P2P_DISABLE=1 is "
              "the usual workaround"
            : "every process of the world must call make_world_communicators; one that failed "
              "or never got there leaves the others waiting here (see its own error). Rerun with "
              "NCCL_DEBUG=INFO to see where it stops; lockstep-doctor under the same mpirun "
              "checks the processes' builds and devices and runs an all-reduce across them");
  }
  if (!failure.empty()) {
    for (int r = 0; r < n_; ++r) {
      std::lock_guard lock(slot(r).mutex);
      abort_slot_locked(slot(r));
    }
    LS_THROW_AS(failure.kind, "cannot make NCCL communicators for ", devices_string(), ": ",
                failure.text);
  }
  if (!nonblocking_) {
    std::fprintf(stderr,
                 "lockstep: NCCL made blocking communicators for %s although lockstep asked for "
                 "non-blocking ones (is NCCL_COMM_BLOCKING=1 set in the environment or an NCCL "
                 "config file?); abort() and the collective timeout cannot interrupt a rank "
                 "blocked inside NCCL\n",
                 devices_string().c_str());
  }
}

std::string NcclClique::devices_string() const {
  std::vector<Device> devices;
  for (int r = 0; r < n_; ++r) devices.push_back(device(r));
  return devices_str(devices) + of_process();
}

// Everything up to ncclGroupEnd; nothing or why it failed.
Failure NcclClique::init() {
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) {
    return {concat("ncclGroupStart failed: ", nccl_error_text(result, nullptr))};
  }
  std::string failure;
  for (int r = 0; r < n_ && failure.empty(); ++r) {
    try {
      DeviceGuard guard(device(r).index);  // NCCL takes the rank's GPU from the current device
      result = ncclCommInitRankConfig(&slot(r).comm, ranks_.nranks, ranks_.id, ranks_.first + r,
                                      &config_);
      if (result != ncclSuccess && result != ncclInProgress) {
        failure = concat("ncclCommInitRankConfig for ", where(r), " failed: ",
                         nccl_error_text(result, slot(r).comm));
      }
    } catch (const Error& e) {
      failure = e.message();
    }
  }
  // Ends the group even after a failure: NCCL cleans the group up there (as ncclCommInitAll does).
  result = ncclGroupEnd();
  if (result == ncclInProgress) {
    nonblocking_ = true;
  } else if (result == ncclSuccess) {
    nonblocking_ = false;  // a non-blocking group with init jobs always answers ncclInProgress
  } else if (failure.empty()) {
    failure = concat("ncclGroupEnd after ncclCommInitRankConfig failed: ",
                     nccl_error_text(result, nullptr));
  }
  return {failure};
}

// Polls every rank until none is ncclInProgress, bounded by the timeout; nothing or why it failed.
Failure NcclClique::wait_all(const char* what, const char* hint) {
  const auto start = Clock::now();
  std::vector<char> done(static_cast<size_t>(n_), 0);
  for (int remaining = n_;;) {
    for (int r = 0; r < n_; ++r) {
      if (done[static_cast<size_t>(r)]) continue;
      ncclResult_t state = ncclInProgress;
      const ncclResult_t result = ncclCommGetAsyncError(slot(r).comm, &state);
      if (result != ncclSuccess) state = result;
      if (state == ncclSuccess) {
        done[static_cast<size_t>(r)] = 1;
        --remaining;
      } else if (state != ncclInProgress) {
        return {concat("NCCL ", what, " of ", where(r), " failed: ",
                       nccl_error_text(state, slot(r).comm))};
      }
    }
    if (remaining == 0) return {};
    if (Clock::now() - start > timeout_) {
      std::string pending;
      for (int r = 0; r < n_; ++r) {
        if (!done[static_cast<size_t>(r)]) pending += (pending.empty() ? "" : ", ") + where(r);
      }
      return {concat("NCCL ", what, " timed out after ", timeout_.count(),
                     " ms (still in progress: ", pending, "); ", hint),
              ErrorKind::kTimeout};
    }
    pause_since(start);
  }
}

NcclClique::~NcclClique() {
  bool clean = !aborted();
  // NCCL runs finalize, destroy and abort as jobs of this thread's group, so none may be open;
  // an unbalanced group_start may even have left our communicators in it.
  if (t_group.depth > 0 || !t_group.members.empty()) {
    const auto ours =
        std::erase_if(t_group.members, [this](const GroupMember& m) { return m.raw == this; });
    close_thread_group();
    clean = clean && ours == 0;
  }
  for (int r = 0; r < n_; ++r) clean = clean && !slot(r).in_group;  // another thread's group
  // Every graph that captured our collectives is gone by now, so the helper's aborts end.
  tearing_down_.store(true, std::memory_order_release);
  if (aborter_.joinable()) aborter_.join();
  if (clean && finalize_all()) return;
  for (int r = 0; r < n_; ++r) {
    std::lock_guard lock(slot(r).mutex);
    abort_slot_locked(slot(r));
  }
}

// See Note [NCCL teardown]. True when every communicator was destroyed.
bool NcclClique::finalize_all() noexcept {
  std::string failure;
  try {
    if (nonblocking_) {
      for (int r = 0; r < n_ && failure.empty(); ++r) {
        DeviceGuard guard(device(r).index, std::nothrow);
        const ncclResult_t result = ncclCommFinalize(slot(r).comm);
        if (result != ncclSuccess && result != ncclInProgress) {
          failure = concat("ncclCommFinalize on ", where(r), " failed: ",
                           nccl_error_text(result, slot(r).comm));
        }
      }
      if (failure.empty()) {
        failure = wait_all("finalize", "outstanding collectives never finished").text;
      }
    }
    // Blocking communicators skip ncclCommFinalize: ncclCommDestroy finalizes them itself.
    for (int r = 0; r < n_ && failure.empty(); ++r) {
      DeviceGuard guard(device(r).index, std::nothrow);
      const ncclResult_t result = ncclCommDestroy(slot(r).comm);
      if (result == ncclSuccess) {
        slot(r).comm = nullptr;
      } else {
        failure =
            concat("ncclCommDestroy on ", where(r), " failed: ", nccl_error_text(result, nullptr));
      }
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (failure.empty()) return true;
  std::fprintf(stderr, "lockstep: tearing down the NCCL communicators of %s: %s; aborting them\n",
               devices_string().c_str(), failure.c_str());
  return false;
}

template <typename Call>
void NcclClique::collective(int rank, const CollectiveDesc& desc, Stream& stream, Call&& call) {
  const NcclCall op(desc);
  const auto start = Clock::now();
  if (aborted()) fail_aborted(rank, op);
  cudaStream_t cuda_stream = cuda_stream_of(stream);
  // The last ncclGroupEnd of a group spanning communicators may have left this one in progress.
  if (t_group.depth == 0) wait_ready(rank, op, start);
  Slot& s = slot(rank);
  ncclResult_t result = ncclSuccess;
  std::string text;
  {
    const std::unique_lock lock = lock_or_fail(rank, op);
    if (t_group.depth > 0) join_group_locked(s, rank);
    DeviceGuard guard(s.device.index);
    result = call(s.comm, cuda_stream);
    if (result != ncclSuccess && result != ncclInProgress) text = nccl_error_text(result, s.comm);
  }
  if (result == ncclInProgress) {
    wait_ready(rank, op, start);
  } else if (result != ncclSuccess) {
    fail_nccl(rank, op, text);
  }
}

void NcclClique::wait_ready(int rank, const NcclCall& op, Clock::time_point start) {
  Slot& s = slot(rank);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    std::string text;
    {
      const std::unique_lock lock = lock_or_fail(rank, op);
      const ncclResult_t result = ncclCommGetAsyncError(s.comm, &state);
      if (result != ncclSuccess) state = result;
      if (state != ncclSuccess && state != ncclInProgress) text = nccl_error_text(state, s.comm);
    }
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail_nccl(rank, op, text);
    if (Clock::now() - start > timeout_) {
      const std::string message = concat(
          "NCCL did not finish ", op.str(), " on ", where(rank), " within ", timeout_.count(),
          " ms (it stayed ncclInProgress). Every rank must issue the same collectives in the same "
          "order with the same counts; a rank that never issues this one leaves its peers waiting. "
          "Rerun with NCCL_DEBUG=INFO for NCCL's view. The clique was aborted");
      abort_all(message);
      LS_THROW_AS(ErrorKind::kTimeout, message);
    }
    pause_since(start);
  }
}

void NcclClique::group_start(int rank) {
  const NcclCall op("group_start");
  const auto start = Clock::now();
  if (aborted()) fail_aborted(rank, op);
  if (t_group.depth == 0) wait_ready(rank, op, start);
  const std::unique_lock lock = lock_or_fail(rank, op);
  join_group_locked(slot(rank), rank, /*check_only=*/true);  // before NCCL's depth changes
  const ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) {
    LS_THROW_AS(ErrorKind::kInternal, "ncclGroupStart on ", where(rank),
                " failed: ", nccl_error_text(result, nullptr));
  }
  ++t_group.depth;
  join_group_locked(slot(rank), rank);
}

void NcclClique::group_end(int rank) {
  const NcclCall op("group_end");
  if (aborted()) fail_aborted(rank, op);
  if (t_group.depth == 0) return;  // an abort on this thread closed the group early: see Note
  const auto start = Clock::now();
  --t_group.depth;
  const ncclResult_t result = ncclGroupEnd();
  if (t_group.depth == 0) {
    const std::vector<GroupMember> members = t_group.members;
    release_thread_group();
    if (aborted()) fail_aborted(rank, op);
    if (result == ncclInProgress) {
      for (const GroupMember& member : members) {
        if (auto clique = member.clique.lock()) clique->wait_ready(member.rank, op, start);
      }
      return;
    }
  }
  if (result != ncclSuccess) {
    fail_nccl(rank, op, nccl_error_text(result, nullptr));
  }
}

void NcclClique::join_group_locked(Slot& s, int rank, bool check_only) {
  const std::thread::id me = std::this_thread::get_id();
  LS_CHECK(!s.in_group || s.group_thread == me, "NCCL communicator of ", where(rank),
           " is in an open group of another thread; a communicator is used by one thread, and a "
           "group spanning communicators is issued entirely by one thread");
  if (s.in_group || check_only) return;
  s.in_group = true;
  s.group_thread = me;
  t_group.members.push_back({weak_from_this(), this, rank});
}

void NcclClique::leave_group(int rank) noexcept {
  // The helper holds a mutex long only for a rank in no group, and this one is in ours.
  Slot& s = slot(rank);
  std::lock_guard lock(s.mutex);
  s.in_group = false;
}

std::unique_lock<std::mutex> NcclClique::lock_or_fail(int rank, const NcclCall& op) {
  std::unique_lock lock(slot(rank).mutex, std::defer_lock);
  const auto start = Clock::now();
  for (;;) {
    if (aborted()) fail_aborted(rank, op);
    if (lock.try_lock()) break;
    pause_since(start);
  }
  if (aborted()) {  // the helper may have aborted this rank just before we got the mutex
    lock.unlock();
    fail_aborted(rank, op);
  }
  return lock;
}

void NcclClique::abort_slot_locked(Slot& s) noexcept {
  if (s.comm == nullptr) return;
  DeviceGuard guard(s.device.index, std::nothrow);
  (void)ncclCommAbort(s.comm);  // nothing more can be done if it fails
  s.comm = nullptr;
}

void NcclClique::abort_all(const std::string& reason) noexcept {
  try {
    std::call_once(abort_once_, [&] {
      {
        std::lock_guard lock(reason_mutex_);
        reason_ = reason;
      }
      aborted_.store(true, std::memory_order_release);  // pollers stop at their next check
      // Our own group would hold our ranks away from the helper: close it. See Note.
      if (t_group.depth > 0) close_thread_group();
      try {
        aborter_ = std::thread([this] { abort_slots(); });
      } catch (const std::system_error&) {  // no thread to be had: abort here, and maybe wait
        abort_slots();
      }
    });
  } catch (...) {
    // std::call_once or a mutex failed (a system error): there is nothing left to try.
  }
}

void NcclClique::abort_slots() noexcept {
  try {
    set_thread_error_context("NCCL abort of " + devices_string());
  } catch (...) {  // only a name for messages
  }
  for (;;) {
    bool waiting = false;
    for (int r = 0; r < n_; ++r) {
      Slot& s = slot(r);
      std::lock_guard lock(s.mutex);  // a rank's own thread holds it only briefly
      if (s.in_group && !tearing_down_.load(std::memory_order_acquire)) {
        waiting = true;  // in another thread's open group: aborted once it leaves
        continue;
      }
      abort_slot_locked(s);  // may wait for the graphs: Note [NCCL abort waits for graphs]
    }
    if (!waiting) return;
    std::this_thread::sleep_for(1ms);
  }
}

void NcclClique::fail_aborted(int rank, const NcclCall& op) {
  if (t_group.depth > 0 && thread_group_has_aborted_member()) close_thread_group();
  LS_THROW_AS(ErrorKind::kAborted, op.str(), " on ", where(rank),
              ": communicator aborted: ", abort_reason());
}

// Any NCCL error aborts the clique: a non-blocking communicator keeps even an argument error as
// its state, and the notes' rule is to abort every rank of the group after an error.
void NcclClique::fail_nccl(int rank, const NcclCall& op, const std::string& text) {
  const std::string message = concat("NCCL ", op.str(), " on ", where(rank), " failed: ", text);
  abort_all(message);
  LS_THROW_AS(ErrorKind::kInternal, message, " (the clique was aborted)");
}

// ---- NcclCommunicator ----------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclClique> clique, int local)
    : clique_(std::move(clique)),
      local_(local),
      rank_(clique_->first_rank() + local),
      device_(clique_->device(local)) {}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::size() const { return clique_->nranks(); }
bool NcclCommunicator::nonblocking() const { return clique_->nonblocking(); }
std::string NcclCommunicator::abort_reason() const { return clique_->abort_reason(); }

void NcclCommunicator::issue(CollectiveDesc desc, Stream& stream) {
  check_collective(desc, rank_, size(), device_, stream);
  record_collective_in_ledger(desc, size());
  const ncclDataType_t type = nccl_dtype(desc.dtype);
  desc.seq = ++issued_;
  // Note [One rank needs no NCCL]: every collective of one rank leaves recv equal to send (the
  // sum, average or maximum of one buffer, a gather or broadcast of one, is that buffer), so an
  // in-place call does nothing and another one copies. NCCL would launch a kernel for each (a
  // graph node per gradient bucket in a one-GPU step), and before 2.29.7 its one-rank average
  // left the last elements unwritten (NVIDIA/nccl#1950, seen on the first GPU run).
  if (size() == 1) {
    if (desc.send != desc.recv && desc.bytes() > 0)
      device_runtime(device_).copy_async(desc.recv, desc.send, desc.bytes(), stream);
    return;
  }
  const ncclRedOp_t op = nccl_op(desc.op);
  clique_->collective(local_, desc, stream, [&](ncclComm_t comm, cudaStream_t s) {
    const CollectiveDesc& d = desc;
    switch (d.kind) {
      case CollectiveKind::kAllReduce:
        return ncclAllReduce(d.send, d.recv, d.count, type, op, comm, s);
      case CollectiveKind::kReduceScatter:
        return ncclReduceScatter(d.send, d.recv, d.count, type, op, comm, s);
      case CollectiveKind::kAllGather: return ncclAllGather(d.send, d.recv, d.count, type, comm, s);
      case CollectiveKind::kBroadcast:
        return ncclBroadcast(d.send, d.recv, d.count, type, d.root, comm, s);
      case CollectiveKind::kReduce:
        return ncclReduce(d.send, d.recv, d.count, type, op, d.root, comm, s);
    }
    return ncclInvalidArgument;
  });
}

void NcclCommunicator::group_start() {
  clique_->group_start(local_);
  ++group_depth_;
}

void NcclCommunicator::group_end() {
  LS_CHECK(group_depth_ > 0, "group_end() on rank ", rank_,
           " without a matching group_start(); calls to group_start()/group_end() must balance");
  --group_depth_;
  clique_->group_end(local_);
}

void NcclCommunicator::abort() {
  clique_->abort_all(concat("abort() was called on the communicator of rank ", rank_, " (",
                            device_.str(), ")"));
}

// ---- The clique's communicators (the factories are in nccl_factories.cpp) -------------------

std::vector<std::unique_ptr<Communicator>> make_nccl_clique(const std::vector<Device>& devices,
                                                            const NcclRanks& ranks,
                                                            std::chrono::milliseconds timeout) {
  auto clique = std::make_shared<NcclClique>(devices, ranks, timeout);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < clique->local_count(); ++r)
    comms.push_back(std::make_unique<NcclCommunicator>(clique, r));
  return comms;
}

}  // namespace ls
