// The kernel executor of the CPU emulator (engine/core/cuda_emulator/emulator.h).
//
// Note [Fibers for CUDA threads]
// A launch runs its blocks in turn on the calling OS thread; within a block every CUDA thread is
// a fiber with a stack from a pool that the OS thread keeps and reuses (mmap, a guard page below
// each). On x86-64 a switch saves the callee-saved registers, MXCSR and the x87 control word and
// swaps stack pointers (ls_emu_switch_stack below): about a hundred times cheaper than glibc's
// swapcontext, which also makes a system call for the signal mask, and block reductions switch
// once per thread per barrier. Elsewhere makecontext/swapcontext do the same. A fiber runs a thread to its end and then starts the
// block's next unstarted thread itself, and after the block's last thread it sets up the next
// block: a kernel without barriers costs a function call per thread and one switch per launch.
// A thread that reaches a barrier (__syncthreads, or the warp barrier of a shuffle) before the
// others waits: its fiber switches straight to the next fiber that can run (one released from a
// barrier, else a fresh one for the next unstarted thread). The last thread to arrive releases
// the waiters and goes on. When nothing can run but threads wait, the launch fails: a barrier
// that some threads of the block exited without reaching (or threads waiting at different
// barriers) is cudaErrorLaunchFailure, its text naming the kernel, the block and the barrier;
// the waiting fibers are dropped and remade. Under AddressSanitizer every switch is announced
// (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber) and a remade fiber's stack
// is unpoisoned.
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/core/cuda_emulator/emulator.h"
#include "engine/core/cuda_emulator/runtime_state.h"

#if defined(__SANITIZE_ADDRESS__)
#define LS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LS_EMU_ASAN 1
#endif
#endif
#ifdef LS_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// ls_emu_switch_stack(save, load): pushes the System V callee-saved registers, MXCSR and the
// x87 control word, stores the stack pointer in *save, loads `load` and pops the same from it.
extern "C" void ls_emu_switch_stack(void** save, void* load);
asm(R"(
  .text
  .globl ls_emu_switch_stack
  .hidden ls_emu_switch_stack
  .type ls_emu_switch_stack, @function
ls_emu_switch_stack:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size ls_emu_switch_stack, .-ls_emu_switch_stack
)");
#endif

namespace ls::cuda_emu {
namespace detail {
constinit thread_local ThreadCoords t_coords{};
}  // namespace detail

namespace {

#if defined(__x86_64__)
struct Context {
  void* sp = nullptr;
};

// A stack that ls_emu_switch_stack "returns" into `entry` (which never returns) with the
// current MXCSR and x87 control word.
void make_context(Context& context, char* stack, size_t bytes, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes);
  auto* slot = reinterpret_cast<uint64_t*>((top - 32) & ~uintptr_t{15});  // 16-byte aligned
  slot[1] = 0;  // entry's return address: none (ends backtraces)
  slot[0] = reinterpret_cast<uint64_t>(entry);
  uint64_t* frame = slot - 7;  // 6 registers, then MXCSR and the control word
  for (int i = 1; i < 7; ++i) frame[i] = 0;
  uint32_t control[2] = {0, 0};
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  std::memcpy(frame, control, sizeof control);
  context.sp = frame;
}

void swap_context(Context& from, Context& to) { ls_emu_switch_stack(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t context{};
};

void make_context(Context& context, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = bytes;
  context.context.uc_link = nullptr;
  makecontext(&context.context, entry, 0);
}

void swap_context(Context& from, Context& to) { swapcontext(&from.context, &to.context); }
#endif

constexpr size_t kStackBytes = 256 * 1024;  // room for ASan's larger frames
constexpr size_t kGuardBytes = 4096;
constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kMaxSharedBytes = 48 * 1024;

enum class WaitKind { kNone, kBlock, kWarp };

struct Fiber {
  Context context;
  char* stack = nullptr;       // kStackBytes usable, a guard page below
  int thread = -1;             // the thread (linear index in its block) it runs; -1 when idle
  WaitKind waiting = WaitKind::kNone;
  int warp = -1;               // the warp barrier it waits at
  unsigned shuffles = 0;       // warp exchanges of its thread so far (picks the slot buffer)
  bool fresh = true;           // needs makecontext before it runs
  void* fake_stack = nullptr;  // ASan's bookkeeping while switched out
};

struct Barrier {
  int arrived = 0;
  int expected = 0;
  int count = 0;   // the predicates of this round (__syncthreads_count)
  int result = 0;  // the count of the last completed round
  std::vector<Fiber*> waiters;
};

struct Launch {
  const char* name = "";
  dim3 grid, block;
  detail::KernelBody body = nullptr;
  void* context = nullptr;
  uint64_t blocks = 0;
  uint64_t next_block = 0;
  int threads = 0;  // per block
  int next_unstarted = 0;
  int finished = 0;
  int waiting = 0;
  Barrier block_barrier;
  Barrier warp_barriers[kMaxThreads / kWarpSize];
  uint64_t warp_slots[2][kMaxThreads] = {};  // double-buffered: see warp_shuffle
  std::vector<Fiber*> runnable;  // released from a barrier, in release order
  size_t runnable_head = 0;
  std::string error;
  bool done = false;
};

struct Executor {
  Context main_context;
  const void* main_stack = nullptr;  // the OS thread's stack, for ASan
  size_t main_stack_bytes = 0;
  void* main_fake_stack = nullptr;
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<Fiber*> idle;
  Fiber* current = nullptr;  // null while the launching code runs
  Launch* launch = nullptr;

  Executor() {
#ifdef LS_EMU_ASAN
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      pthread_attr_getstack(&attr, &addr, &main_stack_bytes);
      main_stack = addr;
      pthread_attr_destroy(&attr);
    }
#endif
  }
  ~Executor() {
    for (auto& fiber : fibers) munmap(fiber->stack - kGuardBytes, kStackBytes + kGuardBytes);
  }
};

thread_local Executor t_executor;

void fiber_main();

// (Re)starts `fiber` at fiber_main on its own stack.
void make_fresh(Fiber& fiber) {
#ifdef LS_EMU_ASAN
  __asan_unpoison_memory_region(fiber.stack, kStackBytes);  // a dropped fiber left poison
#endif
  make_context(fiber.context, fiber.stack, kStackBytes, fiber_main);
  fiber.fresh = false;
  fiber.thread = -1;
  fiber.waiting = WaitKind::kNone;
  fiber.fake_stack = nullptr;
}

Fiber* idle_fiber(Executor& ex) {
  if (ex.idle.empty()) {
    void* memory = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (memory == MAP_FAILED) {
      std::fprintf(stderr, "lockstep CUDA emulator: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(memory, kGuardBytes, PROT_NONE);
    auto fiber = std::make_unique<Fiber>();
    fiber->stack = static_cast<char*>(memory) + kGuardBytes;
    ex.idle.push_back(fiber.get());
    ex.fibers.push_back(std::move(fiber));
  }
  Fiber* fiber = ex.idle.back();
  ex.idle.pop_back();
  if (fiber->fresh) make_fresh(*fiber);
  return fiber;
}

void set_thread(Launch& l, int thread) {
  const unsigned x = l.block.x, xy = l.block.x * l.block.y;
  const auto t = static_cast<unsigned>(thread);
  detail::t_coords.thread_idx = {t % x, (t % xy) / x, t / xy};
}

// Sets up the next block; false when every block has run.
bool advance_block(Launch& l) {
  if (l.next_block >= l.blocks) return false;
  const uint64_t b = l.next_block++;
  const uint64_t gx = l.grid.x, gxy = uint64_t{l.grid.x} * l.grid.y;
  detail::t_coords.block_idx = {static_cast<unsigned>(b % gx), static_cast<unsigned>((b % gxy) / gx),
                                static_cast<unsigned>(b / gxy)};
  l.next_unstarted = 0;
  l.finished = 0;
  return true;
}

std::string block_str(const Launch& l) {
  const uint3 b = detail::t_coords.block_idx;
  return "block (" + std::to_string(b.x) + ", " + std::to_string(b.y) + ", " +
         std::to_string(b.z) + ") of " + std::to_string(l.threads) + " threads";
}

// Why the threads still waiting can never be released.
std::string describe_stuck(const Launch& l) {
  const int at_block = l.block_barrier.arrived;
  std::set<int> warps;
  int at_warp = 0;
  for (const Barrier& b : l.warp_barriers) {
    if (b.arrived == 0) continue;
    warps.insert(static_cast<int>(&b - l.warp_barriers));
    at_warp += b.arrived;
  }
  std::string what = "kernel " + kernel_name(l.name) + ", " + block_str(l) + ": ";
  const int exited = l.finished;
  if (at_warp == 0) {
    return what + "__syncthreads() reached by " + std::to_string(at_block) + " of " +
           std::to_string(l.threads) + " threads; " + std::to_string(exited) +
           " exited without reaching it (a barrier in code that not every thread runs)";
  }
  const int warp = *warps.begin();
  const Barrier& b = l.warp_barriers[warp];
  if (at_block == 0 && warps.size() == 1) {
    return what + "warp barrier (__shfl_*_sync / __syncwarp) of warp " + std::to_string(warp) +
           " reached by " + std::to_string(b.arrived) + " of its " + std::to_string(b.expected) +
           " threads; the others exited without reaching it";
  }
  return what + "threads wait at different barriers: " + std::to_string(at_block) +
         " at __syncthreads(), " + std::to_string(at_warp) + " at warp barriers (__shfl_*_sync / " +
         "__syncwarp) of " + std::to_string(warps.size()) + " warp(s); " + std::to_string(exited) +
         " exited";
}

// The fiber to run next in the current launch: a released one, else a fresh one for the next
// unstarted thread (after the next block's setup when this block is done); null when the launch
// is done or stuck (then l.error says why).
Fiber* pick_next(Executor& ex) {
  Launch& l = *ex.launch;
  if (l.runnable_head < l.runnable.size()) {
    Fiber* fiber = l.runnable[l.runnable_head++];
    if (l.runnable_head == l.runnable.size()) {
      l.runnable.clear();
      l.runnable_head = 0;
    }
    return fiber;
  }
  if (l.next_unstarted < l.threads) return idle_fiber(ex);
  if (l.waiting > 0) {
    l.error = describe_stuck(l);
    return nullptr;
  }
  if (l.finished == l.threads && advance_block(l)) return idle_fiber(ex);
  l.done = true;
  return nullptr;
}

#ifdef LS_EMU_ASAN
const void* stack_bottom(const Executor& ex, const Fiber* fiber) {
  return fiber != nullptr ? fiber->stack : ex.main_stack;
}
size_t stack_bytes(const Executor& ex, const Fiber* fiber) {
  return fiber != nullptr ? kStackBytes : ex.main_stack_bytes;
}
#endif

// Switches from the running fiber (null: the launching code) to `to` (null: back to it).
void switch_to(Executor& ex, Fiber* from, Fiber* to) {
  Context& from_context = from != nullptr ? from->context : ex.main_context;
  Context& to_context = to != nullptr ? to->context : ex.main_context;
  ex.current = to;
#ifdef LS_EMU_ASAN
  void** fake = from != nullptr ? &from->fake_stack : &ex.main_fake_stack;
  __sanitizer_start_switch_fiber(fake, stack_bottom(ex, to), stack_bytes(ex, to));
#endif
  swap_context(from_context, to_context);
#ifdef LS_EMU_ASAN
  __sanitizer_finish_switch_fiber(*fake, nullptr, nullptr);
#endif
  ex.current = from;
  if (from != nullptr && from->thread >= 0) set_thread(*ex.launch, from->thread);
}

// Every fiber's life: run unstarted threads (and blocks) while there are any, then hand over to
// whatever can run and wait, idle, until picked again.
void fiber_main() {
  Executor& ex = t_executor;
  Fiber* self = ex.current;
#ifdef LS_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
  for (;;) {
    Launch& l = *ex.launch;
    for (;;) {
      if (l.next_unstarted < l.threads) {
        self->thread = l.next_unstarted++;
        self->shuffles = 0;
        set_thread(l, self->thread);
        l.body(l.context);
        self->thread = -1;
        ++l.finished;
        continue;
      }
      if (l.finished == l.threads && advance_block(l)) continue;
      break;
    }
    Fiber* next = pick_next(ex);
    ex.idle.push_back(self);
    switch_to(ex, self, next);
  }
}

Executor& executor_in_kernel(const char* what) {
  Executor& ex = t_executor;
  if (ex.current == nullptr || ex.launch == nullptr) {
    std::fprintf(stderr, "lockstep CUDA emulator: %s called outside a kernel\n", what);
    std::abort();
  }
  return ex;
}

// Arrives at `b`; returns once every thread expected there has arrived.
void arrive(Executor& ex, Barrier& b, WaitKind kind, int warp) {
  Launch& l = *ex.launch;
  Fiber* self = ex.current;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    b.result = b.count;
    b.count = 0;
    for (Fiber* waiter : b.waiters) {
      waiter->waiting = WaitKind::kNone;
      l.runnable.push_back(waiter);
    }
    l.waiting -= static_cast<int>(b.waiters.size());
    b.waiters.clear();
    return;
  }
  self->waiting = kind;
  self->warp = warp;
  b.waiters.push_back(self);
  ++l.waiting;
  switch_to(ex, self, pick_next(ex));
}

std::string check_config(dim3 grid, dim3 block, size_t shared_bytes) {
  if (block.x == 0 || block.y == 0 || block.z == 0) return "a block dimension is 0";
  if (block.x > 1024 || block.y > 1024 || block.z > 64) return "blockDim over (1024, 1024, 64)";
  if (uint64_t{block.x} * block.y * block.z > kMaxThreads) return "more than 1024 threads per block";
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return "a grid dimension is 0";
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    return "gridDim over (2^31 - 1, 65535, 65535)";
  if (shared_bytes > kMaxSharedBytes) return "more than 48 KiB of dynamic shared memory";
  return "";
}

// ---- the launch log ---------------------------------------------------------------------------
struct LaunchLog {
  std::mutex mutex;
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::ofstream file;
  bool opened = false;
};

LaunchLog& launch_log() {
  static auto* log = new LaunchLog;  // never destroyed: launches may come after static destructors
  return *log;
}

void record_launch(const char* launched_as) {
  thread_local std::unordered_set<const char*> seen_here;  // string literals: one per launch site
  if (!seen_here.insert(launched_as).second) return;
  const std::string name = kernel_name(launched_as);
  LaunchLog& log = launch_log();
  std::lock_guard lock(log.mutex);
  if (!log.seen.insert(name).second) return;
  log.names.push_back(name);
  if (!log.opened) {
    log.opened = true;
    if (const char* path = std::getenv("LOCKSTEP_EMULATOR_LAUNCH_LOG"); path != nullptr && *path)
      log.file.open(path, std::ios::trunc);
  }
  if (log.file.is_open()) log.file << name << '\n' << std::flush;
}

}  // namespace

std::string kernel_name(const char* launched_as) {
  std::string name(launched_as);
  if (const size_t angle = name.find('<'); angle != std::string::npos) name.resize(angle);
  while (!name.empty() && name.back() == ' ') name.pop_back();
  if (const size_t colon = name.rfind("::"); colon != std::string::npos) name.erase(0, colon + 2);
  return name;
}

namespace {
std::atomic<int64_t> g_device_launches{0};
}  // namespace

int64_t device_launches() { return g_device_launches.load(); }
void note_library_launch() { g_device_launches.fetch_add(1); }

std::vector<std::string> launched_kernels() {
  LaunchLog& log = launch_log();
  std::lock_guard lock(log.mutex);
  return log.names;
}

namespace detail {

void run_launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                KernelBody body, void* context) {
  Executor& ex = t_executor;
  if (ex.launch != nullptr) {
    std::fprintf(stderr, "lockstep CUDA emulator: %s launched from inside a kernel\n", name);
    std::abort();
  }
  int device = 0;
  if (const cudaError_t status = check_current_device(&device); status != cudaSuccess) {
    fail(status);
    return;
  }
  if (!check_config(grid, block, shared_bytes).empty()) {
    fail(cudaErrorInvalidConfiguration);
    return;
  }
  if (stream_device(stream) != device) {  // dead, or a stream of another device
    fail(cudaErrorInvalidResourceHandle);
    return;
  }
  record_launch(name);
  g_device_launches.fetch_add(1);
  auto launch = std::make_unique<Launch>();  // ~12 KiB: not on the caller's stack
  Launch& l = *launch;
  l.name = name;
  l.grid = grid;
  l.block = block;
  l.body = body;
  l.context = context;
  l.blocks = uint64_t{grid.x} * grid.y * grid.z;
  l.threads = static_cast<int>(block.x * block.y * block.z);
  l.block_barrier.expected = l.threads;
  for (int w = 0; w * kWarpSize < l.threads; ++w)
    l.warp_barriers[w].expected = std::min(kWarpSize, l.threads - w * kWarpSize);
  const ThreadCoords saved = t_coords;
  t_coords.block_dim = block;
  t_coords.grid_dim = grid;
  ex.launch = &l;
  advance_block(l);
  switch_to(ex, nullptr, idle_fiber(ex));
  // Back: done, or stuck. Fibers still inside a thread are dropped and remade before reuse.
  if (!l.done) {
    for (auto& fiber : ex.fibers) {
      if (fiber->thread < 0) continue;
      fiber->fresh = true;
      fiber->thread = -1;
      ex.idle.push_back(fiber.get());
    }
    fail_launch(l.error);
  }
  ex.launch = nullptr;
  t_coords = saved;
}

}  // namespace detail

void syncthreads() {
  Executor& ex = executor_in_kernel("__syncthreads()");
  arrive(ex, ex.launch->block_barrier, WaitKind::kBlock, -1);
}

int syncthreads_count(int predicate) {
  Executor& ex = executor_in_kernel("__syncthreads_count()");
  Barrier& b = ex.launch->block_barrier;
  b.count += predicate != 0 ? 1 : 0;
  arrive(ex, b, WaitKind::kBlock, -1);
  return b.result;  // stays until every thread has left this round (see arrive)
}

uint64_t warp_shuffle(unsigned mask, uint64_t bits, Shuffle kind, int arg, int width) {
  (void)mask;  // every existing lane of the warp must take part, as with a full mask
  Executor& ex = executor_in_kernel("__shfl_*_sync()");
  Launch& l = *ex.launch;
  const int thread = ex.current->thread;
  const int warp = thread / kWarpSize, lane = thread % kWarpSize;
  Barrier& b = l.warp_barriers[warp];
  // Exchanges alternate between two slot buffers, so one warp barrier each is enough: a lane
  // writes a buffer again two exchanges later, after the barrier of the exchange between, which
  // every lane reaches only after reading this one.
  uint64_t* slots = l.warp_slots[ex.current->shuffles++ & 1u];
  slots[thread] = bits;
  arrive(ex, b, WaitKind::kWarp, warp);
  if (width <= 0 || width > kWarpSize) width = kWarpSize;
  const int segment = lane / width * width, in_segment = lane % width;
  int source = lane;
  switch (kind) {
    case Shuffle::kIdx: source = segment + ((arg % width) + width) % width; break;
    case Shuffle::kUp: source = in_segment >= arg ? lane - arg : lane; break;
    case Shuffle::kDown: source = in_segment + arg < width ? lane + arg : lane; break;
    case Shuffle::kXor: {
      const int partner = lane ^ arg;
      source = partner / width == lane / width ? partner : lane;
      break;
    }
  }
  const int source_thread = warp * kWarpSize + source;
  return source_thread < l.threads ? slots[source_thread] : slots[thread];
}

void syncwarp(unsigned mask) {
  (void)mask;
  Executor& ex = executor_in_kernel("__syncwarp()");
  const int warp = ex.current->thread / kWarpSize;
  arrive(ex, ex.launch->warp_barriers[warp], WaitKind::kWarp, warp);
}

}  // namespace ls::cuda_emu
