// Run-time kernel selection and the public entry points of kernels/kernels.hpp.
//
// At first use we ask xsimd which instruction sets the CPU has, honour TAPEGRAD_ARCH (which may only
// lower the choice), and build a complete table: the ISA's own kernels, the scalar reference for
// everything it leaves null. float calls go through the table; double calls use the reference,
// except GEMM, which the ISA may provide for float64 gradient checks too.
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <xsimd/xsimd.hpp>

#include "kernels/ref/ref.hpp"
#include "kernels/strided.hpp"
#include "kernels/table.hpp"

namespace tapegrad::kernels {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::sse2: return "sse2";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

std::vector<Isa> available_isas() {
  const auto arch = xsimd::available_architectures();
  std::vector<Isa> out{Isa::scalar};
  if (arch.sse2) out.push_back(Isa::sse2);
  if (arch.avx2 && arch.fma3_avx2) out.push_back(Isa::avx2);
  if (arch.avx512f && arch.avx512bw && arch.avx512dq && arch.avx512cd) out.push_back(Isa::avx512);
  return out;
}

namespace {

KernelTable reference_table() {
  KernelTable t;
  t.isa = Isa::scalar;
  t.gemm_f32 = ref::gemm<float>;
  t.gemm_f64 = ref::gemm<double>;
  t.unary = ref::unary<float>;
  t.unary_backward = ref::unary_backward<float>;
  t.affine = ref::affine<float>;
  t.binary = ref::binary<float>;
  t.binary_backward = ref::binary_backward<float>;
  t.sum_to = ref::sum_to<float>;
  t.sum_axis = ref::sum_axis<float>;
  t.max_axis = ref::max_axis<float>;
  t.sum_squares = ref::sum_squares<float>;
  t.softmax = ref::softmax<float>;
  t.softmax_backward = ref::softmax_backward<float>;
  t.log_softmax = ref::log_softmax<float>;
  t.log_softmax_backward = ref::log_softmax_backward<float>;
  t.cross_entropy = ref::cross_entropy<float>;
  t.layer_norm = ref::layer_norm<float>;
  t.layer_norm_backward = ref::layer_norm_backward<float>;
  t.embedding = ref::embedding<float>;
  t.embedding_backward = ref::embedding_backward<float>;
  t.additive_score = ref::additive_score<float>;
  t.additive_score_backward = ref::additive_score_backward<float>;
  t.adam_update = ref::adam_update<float>;
  return t;
}

// Fills every null entry of `t` from `fallback`.
KernelTable complete(KernelTable t, const KernelTable& fallback) {
#define TG_FILL(f) \
  if (!t.f) t.f = fallback.f
  TG_FILL(gemm_f32);
  TG_FILL(gemm_f64);
  TG_FILL(unary);
  TG_FILL(unary_backward);
  TG_FILL(affine);
  TG_FILL(binary);
  TG_FILL(binary_backward);
  TG_FILL(sum_to);
  TG_FILL(sum_axis);
  TG_FILL(max_axis);
  TG_FILL(sum_squares);
  TG_FILL(softmax);
  TG_FILL(softmax_backward);
  TG_FILL(log_softmax);
  TG_FILL(log_softmax_backward);
  TG_FILL(cross_entropy);
  TG_FILL(layer_norm);
  TG_FILL(layer_norm_backward);
  TG_FILL(embedding);
  TG_FILL(embedding_backward);
  TG_FILL(additive_score);
  TG_FILL(additive_score_backward);
  TG_FILL(adam_update);
#undef TG_FILL
  return t;
}

KernelTable build_table(Isa isa) {
  const KernelTable scalar = reference_table();
  switch (isa) {
    case Isa::scalar: return scalar;
    case Isa::sse2: return complete(simd_table_sse2(), scalar);
    case Isa::avx2: return complete(simd_table_avx2(), scalar);
    case Isa::avx512: return complete(simd_table_avx512(), scalar);
  }
  return scalar;
}

Isa parse_isa(const std::string& s) {
  if (s == "scalar") return Isa::scalar;
  if (s == "sse2") return Isa::sse2;
  if (s == "avx2") return Isa::avx2;
  if (s == "avx512") return Isa::avx512;
  throw std::runtime_error("TAPEGRAD_ARCH: unknown instruction set '" + s + "' (expected avx512, avx2, sse2 or scalar)");
}

bool supported(Isa isa) {
  for (Isa a : available_isas())
    if (a == isa) return true;
  return false;
}

Isa initial_isa() {
  const auto avail = available_isas();
  if (const char* env = std::getenv("TAPEGRAD_ARCH"); env && *env) {
    const Isa want = parse_isa(env);
    if (!supported(want))
      throw std::runtime_error(std::string("TAPEGRAD_ARCH=") + env + ": this CPU does not support it");
    return want;
  }
  return avail.back();
}

struct State {
  KernelTable table;
  State() : table(build_table(initial_isa())) {}
};

State& state() {
  static State s;
  return s;
}

}  // namespace

const KernelTable& table() { return state().table; }

Isa active_isa() { return table().isa; }

void set_isa(Isa isa) {
  if (!supported(isa)) throw std::runtime_error(std::string("set_isa: this CPU does not support ") + isa_name(isa));
  state().table = build_table(isa);
}

namespace {
int initial_threads() {
  if (const char* env = std::getenv("TAPEGRAD_THREADS"); env && *env) {
    const int n = std::atoi(env);
    if (n < 1) throw std::runtime_error(std::string("TAPEGRAD_THREADS=") + env + ": expected a positive integer");
    omp_set_num_threads(n);
  }
  return omp_get_max_threads();
}
std::atomic<int>& thread_count() {
  static std::atomic<int> n{initial_threads()};
  return n;
}
}  // namespace

int num_threads() { return thread_count().load(); }

void set_num_threads(int n) {
  if (n < 1) throw std::runtime_error("set_num_threads: expected a positive count, got " + std::to_string(n));
  omp_set_num_threads(n);
  thread_count() = n;
}

namespace {
int64_t read_cache_size(int index) {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
  std::string s;
  if (!(f >> s) || s.empty()) return 0;
  int64_t mult = 1;
  if (s.back() == 'K') mult = 1024, s.pop_back();
  else if (s.back() == 'M') mult = 1024 * 1024, s.pop_back();
  try {
    return std::stoll(s) * mult;
  } catch (...) {
    return 0;
  }
}
}  // namespace

const CacheInfo& cache_info() {
  static const CacheInfo info = [] {
    CacheInfo c;
    // index0 = L1d, index1 = L1i, index2 = L2, index3 = L3 on Linux x86.
    if (int64_t v = read_cache_size(0)) c.l1d = v;
    if (int64_t v = read_cache_size(2)) c.l2 = v;
    if (int64_t v = read_cache_size(3)) c.l3 = v;
    return c;
  }();
  return info;
}

// ----------------------------------------------------------------------------------------------
// Public entry points: float through the table, double through the reference.

template <>
void gemm<float>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  table().gemm_f32(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
template <>
void gemm<double>(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                  const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  table().gemm_f64(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <class T>
void gemm_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta, T* C, int64_t ldc,
                  int64_t sc) {
  if (batch <= 0 || M <= 0 || N <= 0) return;
  if constexpr (std::is_same_v<T, float>) {
    if (auto f = table().gemm_batched_f32)
      return f(batch, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc);
  } else {
    if (auto f = table().gemm_batched_f64)
      return f(batch, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc);
  }
  for (int64_t i = 0; i < batch; ++i)
    gemm<T>(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
}

template <class T>
int64_t packed_b_size(int64_t K, int64_t N) {
  const KernelTable& t = table();
  const auto size = std::is_same_v<T, float> ? t.packed_b_size_f32 : t.packed_b_size_f64;
  return size && K > 0 && N > 0 ? size(K, N) : 0;
}

template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb, T* buffer) {
  PackedB<T> p{trans_b, K, N, ldb, B, table().isa, nullptr};
  if (!buffer || packed_b_size<T>(K, N) == 0) return p;
  if constexpr (std::is_same_v<T, float>)
    table().pack_b_f32(trans_b, K, N, B, ldb, buffer);
  else
    table().pack_b_f64(trans_b, K, N, B, ldb, buffer);
  p.panels = buffer;
  return p;
}

template <class T>
void gemm_packed_b(bool ta, int64_t M, T alpha, const T* A, int64_t lda, const PackedB<T>& B, T beta, T* C,
                   int64_t ldc) {
  if (M <= 0 || B.N <= 0) return;
  const KernelTable& t = table();
  if (!B.panels || B.isa != t.isa) return gemm<T>(ta, B.trans, M, B.N, B.K, alpha, A, lda, B.source, B.ld, beta, C, ldc);
  if constexpr (std::is_same_v<T, float>)
    t.gemm_packed_b_f32(ta, B.trans, M, B.N, B.K, alpha, A, lda, B.source, B.ld, B.panels, beta, C, ldc);
  else
    t.gemm_packed_b_f64(ta, B.trans, M, B.N, B.K, alpha, A, lda, B.source, B.ld, B.panels, beta, C, ldc);
}

// Routes a kernel: float -> table entry, double -> reference template.
#define TG_ROUTE(name, ...)                                     \
  if constexpr (std::is_same_v<T, float>) {                     \
    return table().name(__VA_ARGS__);                           \
  } else {                                                      \
    return ref::name<T>(__VA_ARGS__);                           \
  }

template <class T>
void unary(Unary op, int64_t n, const T* x, T* y) { TG_ROUTE(unary, op, n, x, y) }
template <class T>
void unary_backward(Unary op, int64_t n, const T* x, const T* y, const T* dy, T* dx) {
  TG_ROUTE(unary_backward, op, n, x, y, dy, dx)
}
template <class T>
void affine(int64_t n, const T* x, T scale, T shift, T* y, bool accumulate) {
  TG_ROUTE(affine, n, x, scale, shift, y, accumulate)
}
template <class T>
void pow_scalar(int64_t n, const T* x, T p, T* y) { ref::pow_scalar<T>(n, x, p, y); }
template <class T>
void pow_scalar_backward(int64_t n, const T* x, T p, const T* dy, T* dx) {
  ref::pow_scalar_backward<T>(n, x, p, dy, dx);
}
template <class T>
void binary(Binary op, int ndim, const int64_t* shape, const T* a, const int64_t* sa, const T* b,
            const int64_t* sb, T* y) {
  TG_ROUTE(binary, op, ndim, shape, a, sa, b, sb, y)
}
template <class T>
void binary_backward(Binary op, int which, int ndim, const int64_t* shape, const T* a, const int64_t* sa,
                     const T* b, const int64_t* sb, const T* dy, T* g) {
  TG_ROUTE(binary_backward, op, which, ndim, shape, a, sa, b, sb, dy, g)
}
template <class T>
void sum_to(int ndim, const int64_t* shape, const T* x, const int64_t* out_strides, T* out) {
  TG_ROUTE(sum_to, ndim, shape, x, out_strides, out)
}
template <class T>
void copy_strided(int ndim, const int64_t* shape, const T* x, const int64_t* xs, T* y) {
  fast::copy_strided<T>(ndim, shape, x, xs, y);
}
template <class T>
void where(int ndim, const int64_t* shape, const T* cond, const int64_t* cs, const T* a, const int64_t* as,
           const T* b, const int64_t* bs, T* y) {
  ref::where<T>(ndim, shape, cond, cs, a, as, b, bs, y);
}
template <class T>
void add_strided(int ndim, const int64_t* shape, const T* dy, T* dx, const int64_t* dxs) {
  fast::add_strided<T>(ndim, shape, dy, dx, dxs);
}
template <class T>
void fill(int64_t n, T value, T* y) { ref::fill<T>(n, value, y); }
template <class T>
void sum_axis(int64_t outer, int64_t n, int64_t inner, const T* x, T* y) { TG_ROUTE(sum_axis, outer, n, inner, x, y) }
template <class T>
void max_axis(int64_t outer, int64_t n, int64_t inner, const T* x, T* y, int64_t* argmax) {
  TG_ROUTE(max_axis, outer, n, inner, x, y, argmax)
}
template <class T>
T sum_all(int64_t n, const T* x) { return ref::sum_all<T>(n, x); }
template <class T>
T sum_squares(int64_t n, const T* x) { TG_ROUTE(sum_squares, n, x) }
template <class T>
void softmax(int64_t rows, int64_t cols, const T* x, T* y, const SoftmaxOptions& o) {
  TG_ROUTE(softmax, rows, cols, x, y, o)
}
template <class T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, double scale) {
  TG_ROUTE(softmax_backward, rows, cols, y, dy, dx, scale)
}
template <class T>
void log_softmax(int64_t rows, int64_t cols, const T* x, T* y) { TG_ROUTE(log_softmax, rows, cols, x, y) }
template <class T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  TG_ROUTE(log_softmax_backward, rows, cols, y, dy, dx)
}
template <class T>
int64_t cross_entropy(int64_t rows, int64_t V, const T* logits, const int32_t* targets, int32_t ignore_index,
                      double eps, T* row_loss, T* grad, double grad_scale) {
  TG_ROUTE(cross_entropy, rows, V, logits, targets, ignore_index, eps, row_loss, grad, grad_scale)
}
template <class T>
void layer_norm(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* beta, double eps, T* y, T* mean,
                T* rstd) {
  TG_ROUTE(layer_norm, rows, cols, x, gamma, beta, eps, y, mean, rstd)
}
template <class T>
void layer_norm_backward(int64_t rows, int64_t cols, const T* x, const T* gamma, const T* mean, const T* rstd,
                         const T* dy, T* dx, T* dgamma, T* dbeta) {
  TG_ROUTE(layer_norm_backward, rows, cols, x, gamma, mean, rstd, dy, dx, dgamma, dbeta)
}
template <class T>
void embedding(int64_t n, int64_t dim, const T* table_, const int32_t* ids, T* y) {
  TG_ROUTE(embedding, n, dim, table_, ids, y)
}
template <class T>
void embedding_backward(int64_t n, int64_t dim, const int32_t* ids, const T* dy, T* dtable) {
  TG_ROUTE(embedding_backward, n, dim, ids, dy, dtable)
}
template <class T>
void additive_score(int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v, T* scores) {
  TG_ROUTE(additive_score, B, S, A, keys, query, v, scores)
}
template <class T>
void additive_score_backward(int64_t B, int64_t S, int64_t A, const T* keys, const T* query, const T* v,
                             const T* dscores, T* dkeys, T* dquery, T* dv) {
  TG_ROUTE(additive_score_backward, B, S, A, keys, query, v, dscores, dkeys, dquery, dv)
}
template <class T>
void adam_update(int64_t n, T* param, const T* grad, T* m, T* v, const AdamParams& p) {
  TG_ROUTE(adam_update, n, param, grad, m, v, p)
}
template <class T>
void dropout(int64_t n, const T* x, double p, uint64_t seed, T* y, uint8_t* mask) {
  ref::dropout<T>(n, x, p, seed, y, mask);
}
#undef TG_ROUTE

namespace {
uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

double uniform_at(uint64_t seed, uint64_t counter) {
  // One splitmix64 round over a Weyl sequence keyed by the seed: cheap per element, and a pure
  // function of (seed, counter), so masks do not depend on thread count or call order.
  return double(splitmix64(seed * 0xD1B54A32D192ED03ull + counter * 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
}

#define TG_INSTANTIATE(T)                                                                                         \
  template int64_t packed_b_size<T>(int64_t, int64_t);                                                           \
  template PackedB<T> pack_b<T>(bool, int64_t, int64_t, const T*, int64_t, T*);                                   \
  template void gemm_packed_b<T>(bool, int64_t, T, const T*, int64_t, const PackedB<T>&, T, T*, int64_t);         \
  template void gemm_batched<T>(int64_t, bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, int64_t,   \
                                const T*, int64_t, int64_t, T, T*, int64_t, int64_t);                            \
  template void unary<T>(Unary, int64_t, const T*, T*);                                                          \
  template void unary_backward<T>(Unary, int64_t, const T*, const T*, const T*, T*);                             \
  template void affine<T>(int64_t, const T*, T, T, T*, bool);                                                    \
  template void pow_scalar<T>(int64_t, const T*, T, T*);                                                         \
  template void pow_scalar_backward<T>(int64_t, const T*, T, const T*, T*);                                      \
  template void binary<T>(Binary, int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, T*);  \
  template void binary_backward<T>(Binary, int, int, const int64_t*, const T*, const int64_t*, const T*,         \
                                   const int64_t*, const T*, T*);                                                \
  template void sum_to<T>(int, const int64_t*, const T*, const int64_t*, T*);                                    \
  template void copy_strided<T>(int, const int64_t*, const T*, const int64_t*, T*);                              \
  template void add_strided<T>(int, const int64_t*, const T*, T*, const int64_t*);                               \
  template void where<T>(int, const int64_t*, const T*, const int64_t*, const T*, const int64_t*, const T*,      \
                         const int64_t*, T*);                                                                    \
  template void fill<T>(int64_t, T, T*);                                                                         \
  template void sum_axis<T>(int64_t, int64_t, int64_t, const T*, T*);                                            \
  template void max_axis<T>(int64_t, int64_t, int64_t, const T*, T*, int64_t*);                                  \
  template T sum_all<T>(int64_t, const T*);                                                                      \
  template T sum_squares<T>(int64_t, const T*);                                                                  \
  template void softmax<T>(int64_t, int64_t, const T*, T*, const SoftmaxOptions&);                               \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*, double);                           \
  template void log_softmax<T>(int64_t, int64_t, const T*, T*);                                                  \
  template void log_softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);                               \
  template int64_t cross_entropy<T>(int64_t, int64_t, const T*, const int32_t*, int32_t, double, T*, T*, double); \
  template void layer_norm<T>(int64_t, int64_t, const T*, const T*, const T*, double, T*, T*, T*);               \
  template void layer_norm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, const T*, const T*, T*,   \
                                       T*, T*);                                                                  \
  template void embedding<T>(int64_t, int64_t, const T*, const int32_t*, T*);                                    \
  template void embedding_backward<T>(int64_t, int64_t, const int32_t*, const T*, T*);                           \
  template void additive_score<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, T*);                  \
  template void additive_score_backward<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, T*, \
                                           T*, T*);                                                              \
  template void adam_update<T>(int64_t, T*, const T*, T*, T*, const AdamParams&);                                \
  template void dropout<T>(int64_t, const T*, double, uint64_t, T*, uint8_t*);

TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
template void copy_strided<int32_t>(int, const int64_t*, const int32_t*, const int64_t*, int32_t*);

}  // namespace tapegrad::kernels
