// oneDNN matmul for the host GEMM: ops/host/onednn_matmul.h says what and why.
#include "ops/host/onednn_matmul.h"

#include <lockstep/error.h>

#include <atomic>
#include <cstdlib>
#include <string_view>

#if LOCKSTEP_HAVE_ONEDNN
#include <omp.h>

#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <vector>
#endif

namespace ls::onednn {
namespace {

// Each oneDNN ISA value is the set of its instruction-set bits, so "at least X" is a mask test.
#if LOCKSTEP_HAVE_ONEDNN
bool cpu_has(dnnl_cpu_isa_t wanted) {
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  return (isa & static_cast<unsigned>(wanted)) == static_cast<unsigned>(wanted);
}
bool cpu_has_bf16_units() { return cpu_has(dnnl_cpu_isa_avx512_core_bf16); }
bool cpu_has_avx512() { return cpu_has(dnnl_cpu_isa_avx512_core); }
bool cpu_has_amx() { return cpu_has(dnnl_cpu_isa_avx512_core_amx); }
#else
bool cpu_has_bf16_units() { return false; }
bool cpu_has_avx512() { return false; }
bool cpu_has_amx() { return false; }
#endif

// LOCKSTEP_ONEDNN=off: no oneDNN for this process (the emulated bf16 numerics, or a comparison
// from the command line).
bool turned_off_by_environment() {
  const char* choice = std::getenv("LOCKSTEP_ONEDNN");
  return choice != nullptr && std::string_view(choice) == "off";
}

std::atomic<bool>& native_bf16_flag() {
  static std::atomic<bool> flag{native_bf16_available() && !turned_off_by_environment()};
  return flag;
}

std::atomic<bool>& f32_flag() {
  static std::atomic<bool> flag{f32_available() && !turned_off_by_environment()};
  return flag;
}

}  // namespace

bool native_bf16_available() {
  static const bool available = cpu_has_bf16_units();
  return available;
}

bool f32_available() {
  static const bool available = cpu_has_avx512();
  return available;
}

bool native_bf16_enabled() { return native_bf16_flag().load(std::memory_order_relaxed); }

void set_native_bf16_enabled(bool enabled) {
  LS_CHECK(!enabled || native_bf16_available(),
           "native bf16 GEMMs need a CPU with AVX512-BF16 or AMX and a build with oneDNN "
           "(scripts/setup installs libdnnl-dev); this build or CPU has neither");
  native_bf16_flag().store(enabled, std::memory_order_relaxed);
}

bool bf16_on_amx() {
  static const bool amx = cpu_has_amx();
  return amx && native_bf16_enabled();
}

bool f32_enabled() { return f32_flag().load(std::memory_order_relaxed); }

void set_f32_enabled(bool enabled) {
  LS_CHECK(!enabled || f32_available(),
           "oneDNN f32 GEMMs need a CPU with AVX-512 and a build with oneDNN (scripts/setup "
           "installs libdnnl-dev); this build or CPU has neither");
  f32_flag().store(enabled, std::memory_order_relaxed);
}

bool f32_faster(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMinMultiplyAdds = int64_t{1} << 18;
  return f32_enabled() && n >= 16 && m * n * k >= kMinMultiplyAdds;
}

#if LOCKSTEP_HAVE_ONEDNN
namespace {

using dnnl::memory;

struct ShapeHash {
  size_t operator()(const MatmulShape& s) const {
    size_t h = static_cast<size_t>(s.operands) * 2 + s.trans_a;
    for (int64_t v : {int64_t{s.trans_b}, s.batch, s.m, s.n, s.k, s.lda, s.ldb, s.ldc, s.stride_a,
                      s.stride_b, s.stride_c}) {
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    }
    return h * 31u ^ std::hash<float>{}(s.alpha) * 7u ^ std::hash<float>{}(s.beta);
  }
};

struct Prepared {
  dnnl::matmul primitive;
  memory::desc a, b, c, scratchpad;
  std::string implementation;
};

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// A row-major matrix of `rows` x `cols` (op(X), as the product sees it) stored with leading
// dimension ld, transposed or not, matrix i at i * stride.
memory::desc matrix_desc(OperandType type, int64_t batch, int64_t rows, int64_t cols, bool trans,
                         int64_t ld, int64_t stride) {
  const auto dt = type == OperandType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::dims strides = trans ? memory::dims{stride, 1, ld} : memory::dims{stride, ld, 1};
  return memory::desc({batch, rows, cols}, dt, strides);
}

Prepared prepare(const MatmulShape& s) {
  const memory::desc a = matrix_desc(s.operands, s.batch, s.m, s.k, s.trans_a, s.lda, s.stride_a);
  const memory::desc b = matrix_desc(s.operands, s.batch, s.k, s.n, s.trans_b, s.ldb, s.stride_b);
  const memory::desc c =
      matrix_desc(OperandType::kF32, s.batch, s.m, s.n, false, s.ldc, s.stride_c);
  dnnl::primitive_attr attr;
  // A scratchpad of our own per thread: a primitive from oneDNN's global cache may be shared
  // with another device's thread, and must then not share a library-owned scratchpad.
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
  if (s.beta != 0.0f) {
    dnnl::post_ops sum;
    sum.append_sum(s.beta);
    attr.set_post_ops(sum);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
    return {dnnl::matmul(pd), a, b, c, pd.scratchpad_desc(), pd.impl_info_str()};
  } catch (const dnnl::error& e) {
    LS_THROW_AS(ErrorKind::kInternal, "oneDNN has no matmul for batch=", s.batch, " m=", s.m,
                " n=", s.n, " k=", s.k, " lda=", s.lda, " ldb=", s.ldb, " ldc=", s.ldc, ": ",
                e.what());
  }
}

// Per calling thread: its primitives, its oneDNN stream and its scratchpad.
struct ThreadState {
  std::unordered_map<MatmulShape, Prepared, ShapeHash> prepared;
  dnnl::stream stream{cpu_engine()};
  std::vector<uint8_t> scratchpad;

  ThreadState() {
    // oneDNN's OpenMP team for calls from this thread: just this thread (see the header).
    omp_set_num_threads(1);
  }
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

const Prepared& prepared(ThreadState& state, const MatmulShape& shape) {
  auto it = state.prepared.find(shape);
  if (it == state.prepared.end()) it = state.prepared.emplace(shape, prepare(shape)).first;
  return it->second;
}

}  // namespace

void matmul(const MatmulShape& shape, const void* a, const void* b, float* c) {
  LS_ASSERT(shape.batch > 0 && shape.m > 0 && shape.n > 0 && shape.k > 0, "onednn::matmul sizes");
  ThreadState& state = thread_state();
  const Prepared& p = prepared(state, shape);
  const size_t scratch_bytes = p.scratchpad.get_size();
  if (state.scratchpad.size() < scratch_bytes) state.scratchpad.resize(scratch_bytes);
  const dnnl::engine& engine = cpu_engine();
  // oneDNN's memory objects wrap our buffers; it never writes A or B.
  memory a_mem(p.a, engine, const_cast<void*>(a));
  memory b_mem(p.b, engine, const_cast<void*>(b));
  memory c_mem(p.c, engine, c);
  memory scratch_mem(p.scratchpad, engine, state.scratchpad.data());
  p.primitive.execute(state.stream, {{DNNL_ARG_SRC, a_mem},
                                     {DNNL_ARG_WEIGHTS, b_mem},
                                     {DNNL_ARG_DST, c_mem},
                                     {DNNL_ARG_SCRATCHPAD, scratch_mem}});
  state.stream.wait();
}

std::string implementation(const MatmulShape& shape) {
  return prepared(thread_state(), shape).implementation;
}

#else  // built without oneDNN: native_bf16_available() is false, so the host GEMM never calls in.

void matmul(const MatmulShape&, const void*, const void*, float*) {
  LS_THROW_AS(ErrorKind::kInternal,
              "this lockstep was built without oneDNN (LOCKSTEP_ONEDNN=OFF or libdnnl-dev "
              "missing)");
}

std::string implementation(const MatmulShape&) { return ""; }

#endif

}  // namespace ls::onednn
