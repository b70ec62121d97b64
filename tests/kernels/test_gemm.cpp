// GEMM tests: the SIMD GEMM (every instruction set this machine has, 1 and 2 threads) against the
// scalar reference ref::gemm, for float32 and float64.
//
// Error bound. Both sides sum K products in float; each result has error at most about
// K * eps * sum_k |alpha a_ik b_kj| + eps * |beta c_ij| from the true value (plus one rounding for
// alpha and beta), in different orders, so we accept
//     |c - c_ref| <= 2 * (K + 2) * eps * (|alpha| * sum_k |a_ik| |b_kj| + |beta| |c_ij|) + tiny,
// evaluated per element with sum_k |a||b| computed exactly enough by the reference on |A|, |B|.
// Also checked: C is never read when beta == 0 (C starts as NaN), elements of C past N in each row
// (ldc > N) are never written, K == 0 gives C = beta * C, and M == 0 or N == 0 leave C alone.
// Slow cases (1000-sized, every transpose) are tagged [.slow].
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/ref/ref.hpp"

namespace k = tapegrad::kernels;

namespace {

// Thread count 2 must exercise the team code even when a busy machine would make the GEMM decide
// a team does not pay (see TeamCost in kernels/simd/gemm_config.hpp). Set before the first GEMM.
const bool kAlwaysTeams = setenv("TAPEGRAD_GEMM_TEAM", "always", 0) == 0;

// Restores the process-wide instruction set and thread count when a test ends (or fails).
struct KernelStateGuard {
  k::Isa isa = k::active_isa();
  int threads = k::num_threads();
  ~KernelStateGuard() {
    k::set_isa(isa);
    k::set_num_threads(threads);
  }
};

// Calls run() on every instruction set this machine has, at 1 and 2 threads (both captured).
template <class F>
void on_every_isa_and_thread_count(F&& run) {
  KernelStateGuard guard;
  for (k::Isa isa : k::available_isas()) {
    k::set_isa(isa);
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(k::isa_name(isa), threads);
      run();
    }
  }
}

template <class T>
std::vector<T> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& x : v) x = T(dist(rng));
  return v;
}

struct Shape {
  bool ta, tb;
  int64_t M, N, K;
  int64_t pad;  // extra elements per row on every leading dimension
  double alpha, beta;
  bool bias = false;  // a random row of N values added to every row of C
  // Then relu, or relu_gate: times [gate > 0] for a random M x N gate, about half of it positive.
  k::GemmAct act = k::GemmAct::none;
};

const char* act_name(k::GemmAct act) {
  return act == k::GemmAct::none ? "" : act == k::GemmAct::relu ? " relu" : " relu_gate";
}

std::string describe(const Shape& s) {
  return std::string(s.ta ? "t" : "n") + (s.tb ? "t" : "n") + " M=" + std::to_string(s.M) +
         " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) + " pad=" + std::to_string(s.pad) +
         " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta) + (s.bias ? " bias" : "") +
         act_name(s.act);
}

// Leading dimensions of a case's stored matrices (row-major, `pad` extra elements per row).
struct Dims {
  int64_t a_rows, lda, b_rows, ldb, c_rows, ldc;
  explicit Dims(const Shape& s)
      : a_rows(s.ta ? s.K : s.M),
        lda((s.ta ? s.M : s.K) + s.pad + 1),
        b_rows(s.tb ? s.N : s.K),
        ldb((s.tb ? s.K : s.N) + s.pad + 1),
        c_rows(s.M),
        ldc(s.N + s.pad) {}
  size_t a_size() const { return size_t(a_rows * lda); }
  size_t b_size() const { return size_t(b_rows * ldb); }
  size_t c_size() const { return size_t(std::max<int64_t>(c_rows * ldc, 1)); }
};

// C0 for a case: random, or NaN inside the M x N window when beta == 0 (it must not be read).
template <class T>
std::vector<T> initial_c(const Shape& s, const Dims& d, uint32_t seed) {
  std::vector<T> c = random_vector<T>(d.c_size(), seed);
  if (s.beta == 0)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) c[size_t(i * d.ldc + j)] = std::numeric_limits<T>::quiet_NaN();
  return c;
}

// The reference result and the per-element error bound (see the file comment) of one matrix.
template <class T>
void reference(const Shape& s, const Dims& d, const T* A, const T* B, const T* C0, k::GemmEpilogue<T> ep,
               T* ref, T* bound) {
  const T* bias = ep.bias;
  std::copy(C0, C0 + d.c_size(), ref);
  k::ref::gemm<T>(s.ta, s.tb, s.M, s.N, s.K, T(s.alpha), A, d.lda, B, d.ldb, T(s.beta), ref, d.ldc, ep);
  std::vector<T> absA(d.a_size()), absB(d.b_size());
  for (size_t i = 0; i < absA.size(); ++i) absA[i] = std::abs(A[i]);
  for (size_t i = 0; i < absB.size(); ++i) absB[i] = std::abs(B[i]);
  std::fill(bound, bound + d.c_size(), T(0));
  k::ref::gemm<T>(s.ta, s.tb, s.M, s.N, s.K, T(1), absA.data(), d.lda, absB.data(), d.ldb, T(0), bound,
                  d.ldc);
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < s.N; ++j) {
      const size_t ix = size_t(i * d.ldc + j);
      const double c = s.beta == 0 ? 0.0 : std::abs(double(C0[ix]));
      const double b = bias ? std::abs(double(bias[j])) : 0.0;
      // The activations only shrink a difference (relu is 1-Lipschitz, the gate multiplies by 0 or 1).
      bound[ix] =
          T(2.0 * double(s.K + 2) * eps * (std::abs(s.alpha) * double(bound[ix]) + std::abs(s.beta) * c + b) +
            std::numeric_limits<T>::min());
    }
}

// Counts elements of C outside their bound, and padding elements (j >= N) that changed.
template <class T>
int64_t count_bad(const Shape& s, const Dims& d, const T* C0, const T* ref, const T* bound, const T* C) {
  int64_t bad = 0;
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t j = 0; j < d.ldc; ++j) {
      const size_t ix = size_t(i * d.ldc + j);
      const bool ok =
          j >= s.N ? C[ix] == C0[ix]
                   : std::isfinite(C[ix]) && std::abs(double(C[ix]) - double(ref[ix])) <= double(bound[ix]);
      if (!ok && bad++ < 3)
        UNSCOPED_INFO("C[" << i << "," << j << "] = " << C[ix] << ", expected "
                           << (j < s.N ? ref[ix] : C0[ix]) << " within " << (j < s.N ? bound[ix] : T(0)));
    }
  return bad;
}

// One case's operands, reference and bound.
template <class T>
struct Problem {
  Shape s;
  Dims d;
  std::vector<T> A, B, C0, bias, gate, ref, bound;
  int64_t ldg;

  explicit Problem(const Shape& sh) : s(sh), d(sh), ldg(sh.N + 3) {
    A = random_vector<T>(d.a_size(), 1);
    B = random_vector<T>(d.b_size(), 2);
    C0 = initial_c<T>(s, d, 3);
    if (s.bias) bias = random_vector<T>(size_t(std::max<int64_t>(s.N, 1)), 4);
    if (s.act == k::GemmAct::relu_gate) gate = random_vector<T>(size_t(std::max<int64_t>(s.M * ldg, 1)), 5);
    ref.resize(d.c_size());
    bound.resize(d.c_size());
    reference<T>(s, d, A.data(), B.data(), C0.data(), epilogue(), ref.data(), bound.data());
  }
  k::GemmEpilogue<T> epilogue() const {
    return {s.bias ? bias.data() : nullptr, s.act, gate.empty() ? nullptr : gate.data(), ldg};
  }

  // Runs the dispatched GEMM on a fresh copy of C; returns the number of bad elements.
  int64_t check() const {
    std::vector<T> C = C0;
    k::gemm<T>(s.ta, s.tb, s.M, s.N, s.K, T(s.alpha), A.data(), d.lda, B.data(), d.ldb, T(s.beta), C.data(),
               d.ldc, epilogue());
    return count_bad<T>(s, d, C0.data(), ref.data(), bound.data(), C.data());
  }

  // The same through a packed B (pack_b made by the caller, possibly on another ISA).
  int64_t check_packed(const k::PackedB<T>& pb) const {
    std::vector<T> C = C0;
    k::gemm_packed_b<T>(s.ta, s.M, T(s.alpha), A.data(), d.lda, pb, T(s.beta), C.data(), d.ldc, epilogue());
    return count_bad<T>(s, d, C0.data(), ref.data(), bound.data(), C.data());
  }
  // Packs B into `buf` (resized to the active path's packed size).
  k::PackedB<T> pack(std::vector<T>& buf) const {
    buf.assign(size_t(k::packed_b_size<T>(s.K, s.N)) + 64 / sizeof(T), T(0));
    T* aligned = buf.data();
    while (reinterpret_cast<uintptr_t>(aligned) % 64) ++aligned;
    return k::pack_b<T>(s.tb, s.K, s.N, B.data(), d.ldb, aligned);
  }
};

// Checks one shape on every instruction set and thread count 1 and 2.
template <class T>
void check_everywhere(const Shape& s) {
  KernelStateGuard guard;
  const Problem<T> p(s);
  for (k::Isa isa : k::available_isas()) {
    k::set_isa(isa);
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(describe(s), k::isa_name(isa), threads);
      CHECK(p.check() == 0);
    }
  }
}

const std::vector<int64_t> kSizes = {1, 2, 3, 7, 15, 17, 31, 33, 65, 127, 129, 257};

}  // namespace

TEMPLATE_TEST_CASE("gemm: square sizes, every transpose, every ISA", "[kernels][gemm]", float, double) {
  const int64_t n = GENERATE(from_range(kSizes));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  check_everywhere<TestType>({ta, tb, n, n, n, 0, 1.0, 0.0});
}

TEMPLATE_TEST_CASE("gemm: non-square shapes and leading dimensions", "[kernels][gemm]", float, double) {
  // M, N, K; pad. Around the register tiles (6 or 8 rows; 64, 32, 16 or 8 columns), the 48-row
  // chunks of transposed A, the in-place limits for small operands and the 512-deep blocks; 200 x
  // 1100 x 600: transposed A in panels against several blocks of B (packed once per depth block);
  // 120 x 70 x 130: transposed A read in place on AVX-512 only (between the two limits); 130 x 140 x
  // 2100: a long-depth product past L2, one unit per thread (choose_units); 2047 x 130 x 300:
  // transposed A 8 KiB apart (lda 2048), whose depth block's lines do not stay in L2, packed a
  // chunk at a time rather than on first use (a_first_use_fits); 515 x 128 x 300 and 1024 x 100 x
  // 200: transposed A past the small-operand limit read in place on AVX-512 because C is at most two
  // B panels wide (kMaxInPlaceAPanels).
  auto [M, N, K, pad] = GENERATE(table<int64_t, int64_t, int64_t, int64_t>({
      {1, 1, 1, 3},      {1, 257, 33, 0},     {257, 1, 33, 1},     {33, 17, 1, 0},     {13, 31, 2, 5},
      {14, 32, 7, 0},    {15, 33, 9, 2},      {28, 64, 16, 0},     {6, 16, 5, 1},      {5, 15, 129, 7},
      {127, 65, 3, 0},   {3, 129, 127, 1},    {65, 127, 17, 4},    {100, 300, 40, 0},  {300, 40, 100, 3},
      {40, 50, 1000, 1}, {20, 1000, 300, 0},  {5000, 17, 20, 2},   {257, 129, 65, 0},  {129, 257, 513, 9},
      {8, 32, 32, 0},    {36, 32, 32, 1},     {49, 64, 600, 0},    {97, 96, 520, 3},   {48, 65, 130, 0},
      {1, 256, 32, 0},   {1, 37, 1000, 2},    {1, 1000, 37, 1},    {1, 5, 7, 0},       {200, 1100, 600, 2},
      {120, 70, 130, 1}, {130, 140, 2100, 0}, {2047, 130, 300, 0}, {515, 128, 300, 1}, {1024, 100, 200, 0},
  }));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  check_everywhere<TestType>({ta, tb, M, N, K, pad, 1.0, 0.0});
}

TEMPLATE_TEST_CASE("gemm_packed_b: B packed once, used by several GEMMs, every ISA", "[kernels][gemm]", float,
                   double) {
  // Around the tiles and the 512-deep blocks (K = 1100: three blocks), N cut inside a panel; the
  // same packing serves two GEMMs (with different beta) and every thread count.
  auto [M, N, K] = GENERATE(table<int64_t, int64_t, int64_t>(
      {{1, 1, 1}, {7, 3, 2}, {64, 768, 256}, {64, 256, 768}, {17, 257, 33}, {129, 65, 1100}, {6, 64, 512}}));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  KernelStateGuard guard;
  const Problem<TestType> p0({ta, tb, M, N, K, 1, 1.0, 0.0}), p1({ta, tb, M, N, K, 1, -0.5, 1.0});
  for (k::Isa isa : k::available_isas()) {
    k::set_isa(isa);
    std::vector<TestType> buf;
    const k::PackedB<TestType> pb = p0.pack(buf);
    CHECK((pb.panels != nullptr) == (isa != k::Isa::scalar));
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(describe(p0.s), k::isa_name(isa), threads);
      CHECK(p0.check_packed(pb) == 0);
      CHECK(p1.check_packed(pb) == 0);
    }
    // Made on this ISA, used on every other: those read B itself.
    for (k::Isa other : k::available_isas()) {
      k::set_isa(other);
      CAPTURE(describe(p0.s), k::isa_name(isa), k::isa_name(other));
      CHECK(p1.check_packed(pb) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("gemm: alpha and beta (beta = 0 never reads C)", "[kernels][gemm]", float, double) {
  const double alpha = GENERATE(1.0, 0.5, -1.5);
  const double beta = GENERATE(0.0, 1.0, 0.25);
  // {1, ..}: the one-row path (four vectors of C, four dot products, their tails).
  auto [M, N, K] = GENERATE(table<int64_t, int64_t, int64_t>(
      {{33, 17, 65}, {129, 70, 600}, {7, 3, 1}, {1, 70, 45}, {1, 35, 300}, {1, 3, 9}}));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  check_everywhere<TestType>({ta, tb, M, N, K, 2, alpha, beta});
}

TEMPLATE_TEST_CASE("gemm: the epilogue, a bias row on the first depth block, relu or its gate on the last",
                   "[kernels][gemm]", float, double) {
  // A linear layer's bias and ReLU (and the ReLU's gradient gate), applied as the tiles are stored.
  // Full and ragged tiles (N around the vectors and panels), the small-matrix and one-row paths,
  // several depth blocks (K 600, 1100: the bias must be added once and the activation applied to
  // the sum of all blocks), the narrow tile (N <= 32), a tall product in bands at 2 threads (300 x
  // 40), B packed on first use (64 x 256 x 768), K 0, with beta 0 (C never read) and beta != 0.
  auto [M, N, K] = GENERATE(table<int64_t, int64_t, int64_t>({{1, 1, 1},
                                                              {7, 3, 2},
                                                              {33, 17, 65},
                                                              {6, 64, 512},
                                                              {129, 70, 600},
                                                              {300, 40, 100},
                                                              {20, 32, 32},
                                                              {64, 256, 768},
                                                              {17, 257, 1100},
                                                              {1, 70, 45},
                                                              {1, 35, 300},
                                                              {5, 7, 0}}));
  const double alpha = GENERATE(1.0, -0.5), beta = GENERATE(0.0, 0.75);
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const k::GemmAct act = GENERATE(k::GemmAct::none, k::GemmAct::relu, k::GemmAct::relu_gate);
  // With an activation the bias is there half the time (the epilogue without one).
  const bool bias = act == k::GemmAct::none || ta;
  const Shape s{ta, tb, M, N, K, 1, alpha, beta, bias, act};
  check_everywhere<TestType>(s);
  // The same through a packed B, on every ISA and both thread counts.
  KernelStateGuard guard;
  const Problem<TestType> p(s);
  for (k::Isa isa : k::available_isas()) {
    k::set_isa(isa);
    std::vector<TestType> buf;
    const k::PackedB<TestType> pb = p.pack(buf);
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(describe(s), k::isa_name(isa), threads);
      CHECK(p.check_packed(pb) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("gemm: a long-depth product split in two halves of K, bitwise the same at 1 and 2 threads",
                   "[kernels][gemm]", float, double) {
  // Weight gradients (K the batch's rows, C small) are computed as two halves of the depth, the
  // upper one into a partial added at the end (gemm_driver.hpp, split_depth); the split depends on
  // the shape only, so 1 and 2 threads must agree bit for bit. Around the limits: K 1024 (the least
  // split), 1023 (not split), K just under 4 max(M, N) (not split), odd K, a C cut inside the tiles.
  auto [M, N, K] = GENERATE(table<int64_t, int64_t, int64_t>({{128, 128, 2048},
                                                              {32, 128, 2048},
                                                              {130, 140, 2101},
                                                              {17, 257, 1100},
                                                              {64, 256, 1024},
                                                              {64, 256, 1023},
                                                              {300, 260, 1100},
                                                              {7, 3, 1500}}));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const double beta = GENERATE(0.0, 0.5);
  // With beta != 0, the bias and a ReLU gradient gate, applied after the halves are added (the
  // gate's rows at each thread).
  const k::GemmAct act = beta != 0.0 ? k::GemmAct::relu_gate : k::GemmAct::none;
  const Shape s{ta, tb, M, N, K, 1, 1.0, beta, beta != 0.0, act};
  KernelStateGuard guard;
  const Problem<TestType> p(s);
  for (k::Isa isa : k::available_isas()) {
    k::set_isa(isa);
    std::vector<TestType> c[2];
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(describe(s), k::isa_name(isa), threads);
      c[threads - 1] = p.C0;
      k::gemm<TestType>(ta, tb, M, N, K, TestType(1), p.A.data(), p.d.lda, p.B.data(), p.d.ldb,
                        TestType(beta), c[threads - 1].data(), p.d.ldc, p.epilogue());
      CHECK(count_bad<TestType>(s, p.d, p.C0.data(), p.ref.data(), p.bound.data(), c[threads - 1].data()) ==
            0);
    }
    CAPTURE(describe(s), k::isa_name(isa));
    CHECK(std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(TestType)) == 0);
  }
}

TEMPLATE_TEST_CASE("gemm: K == 0 scales C by beta; empty M or N leave C alone", "[kernels][gemm]", float,
                   double) {
  const double beta = GENERATE(0.0, 1.0, 0.25);
  auto [M, N, K] =
      GENERATE(table<int64_t, int64_t, int64_t>({{5, 7, 0}, {40, 33, 0}, {0, 5, 3}, {5, 0, 3}, {0, 0, 0}}));
  check_everywhere<TestType>({false, false, M, N, K, 1, 1.5, beta});
  // alpha == 0 is the same as K == 0: A and B are not needed.
  check_everywhere<TestType>({true, false, M, N, K + 3, 1, 0.0, beta});
}

TEMPLATE_TEST_CASE("gemm_batched: strides, broadcast operands, attention shapes", "[kernels][gemm]", float,
                   double) {
  using T = TestType;
  // batch, M, N, K, which operand is broadcast with stride 0: 0 none, 1 A, 2 B.
  auto [batch, M, N, K, broadcast] = GENERATE(table<int64_t, int64_t, int64_t, int64_t, int>({
      {5, 17, 33, 9, 0},
      {5, 17, 33, 9, 2},
      {3, 40, 7, 65, 1},
      {256, 32, 32, 32, 0},  // attention: (batch x heads) of T x T x head_dim
      {64, 32, 32, 64, 2},
      {3, 300, 200, 100, 0},  // large matrices, batch not a multiple of the team
      {1, 65, 65, 65, 0},
  }));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const double beta = GENERATE(0.0, 0.5);
  const Shape s{ta, tb, M, N, K, 1, 0.75, beta};
  CAPTURE(describe(s), batch, broadcast);
  const Dims d(s);
  const int64_t sa = broadcast == 1 ? 0 : int64_t(d.a_size()), sb = broadcast == 2 ? 0 : int64_t(d.b_size());
  const int64_t sc = int64_t(d.c_size());
  const std::vector<T> A = random_vector<T>(broadcast == 1 ? d.a_size() : d.a_size() * size_t(batch), 11);
  const std::vector<T> B = random_vector<T>(broadcast == 2 ? d.b_size() : d.b_size() * size_t(batch), 12);
  std::vector<T> C0;
  for (int64_t b = 0; b < batch; ++b) {
    const auto c = initial_c<T>(s, d, uint32_t(13 + b));
    C0.insert(C0.end(), c.begin(), c.end());
  }
  std::vector<T> ref(C0.size()), bound(C0.size());
  for (int64_t b = 0; b < batch; ++b)
    reference<T>(s, d, A.data() + b * sa, B.data() + b * sb, C0.data() + b * sc, {}, ref.data() + b * sc,
                 bound.data() + b * sc);

  on_every_isa_and_thread_count([&] {
    std::vector<T> C = C0;
    k::gemm_batched<T>(batch, ta, tb, M, N, K, T(s.alpha), A.data(), d.lda, sa, B.data(), d.ldb, sb,
                       T(s.beta), C.data(), d.ldc, sc);
    int64_t bad = 0;
    for (int64_t b = 0; b < batch; ++b)
      bad += count_bad<T>(s, d, C0.data() + b * sc, ref.data() + b * sc, bound.data() + b * sc,
                          C.data() + b * sc);
    CHECK(bad == 0);
  });
}

TEMPLATE_TEST_CASE("gemm_nd_batched: batch dims that do not merge run as one batch, every ISA",
                   "[kernels][gemm]", float, double) {
  using T = TestType;
  // A batch shape and each operand's stride per batch dim, in whole matrices: gaps keep dims from
  // merging (attention's [B, H] heads, split off the feature axis), 0 broadcasts an operand.
  struct Case {
    std::vector<int64_t> shape, a, b, c;
  };
  const Case cs = GENERATE(values<Case>({
      {{5, 3}, {4, 1}, {3, 1}, {3, 1}},   // A's gap keeps the two dims apart: one 15-matrix layout
      {{64, 4}, {5, 1}, {4, 1}, {4, 1}},  // the small Transformer's heads
      {{2, 3, 4}, {7, 3, 1}, {12, 4, 1}, {12, 4, 1}},  // three dims: a loop over the first
      {{3, 4}, {4, 1}, {0, 1}, {4, 1}},                // B broadcast over the first dim
  }));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const double beta = GENERATE(0.0, 0.5);
  const Shape s{ta, tb, 32, 17, 9, 1, 0.75, beta};
  CAPTURE(describe(s), cs.shape, cs.a, cs.b, cs.c);
  const Dims d(s);
  const int nd = int(cs.shape.size());
  int64_t count = 1, span_a = 1, span_b = 1, span_c = 1;
  for (int i = 0; i < nd; ++i) {
    count *= cs.shape[size_t(i)];
    span_a += (cs.shape[size_t(i)] - 1) * cs.a[size_t(i)];
    span_b += (cs.shape[size_t(i)] - 1) * cs.b[size_t(i)];
    span_c += (cs.shape[size_t(i)] - 1) * cs.c[size_t(i)];
  }
  // Matrix m's offsets (in matrices) in the row-major walk of the batch shape.
  auto offset = [&](const std::vector<int64_t>& st, int64_t m) {
    int64_t off = 0;
    for (int i = nd - 1; i >= 0; --i)
      off += m % cs.shape[size_t(i)] * st[size_t(i)], m /= cs.shape[size_t(i)];
    return off;
  };
  std::vector<int64_t> sa(cs.shape.size()), sb(cs.shape.size()), sc(cs.shape.size());
  for (size_t i = 0; i < size_t(nd); ++i)
    sa[i] = cs.a[i] * int64_t(d.a_size()), sb[i] = cs.b[i] * int64_t(d.b_size()),
    sc[i] = cs.c[i] * int64_t(d.c_size());
  const std::vector<T> A = random_vector<T>(size_t(span_a) * d.a_size(), 21);
  const std::vector<T> B = random_vector<T>(size_t(span_b) * d.b_size(), 22);
  std::vector<T> C0(size_t(span_c) * d.c_size());
  for (int64_t m = 0; m < span_c; ++m) {
    const auto c = initial_c<T>(s, d, uint32_t(23 + m));
    std::copy(c.begin(), c.end(), C0.begin() + m * int64_t(d.c_size()));
  }
  std::vector<T> ref(C0.size()), bound(C0.size());
  for (int64_t m = 0; m < count; ++m) {
    const int64_t oa = offset(cs.a, m) * int64_t(d.a_size()), ob = offset(cs.b, m) * int64_t(d.b_size()),
                  oc = offset(cs.c, m) * int64_t(d.c_size());
    reference<T>(s, d, A.data() + oa, B.data() + ob, C0.data() + oc, {}, ref.data() + oc, bound.data() + oc);
  }

  on_every_isa_and_thread_count([&] {
    std::vector<T> C = C0;
    k::gemm_nd_batched<T>(nd, cs.shape.data(), ta, tb, s.M, s.N, s.K, T(s.alpha), A.data(), d.lda, sa.data(),
                          B.data(), d.ldb, sb.data(), T(s.beta), C.data(), d.ldc, sc.data());
    int64_t bad = 0;
    for (int64_t m = 0; m < count; ++m) {
      const int64_t oc = offset(cs.c, m) * int64_t(d.c_size());
      bad += count_bad<T>(s, d, C0.data() + oc, ref.data() + oc, bound.data() + oc, C.data() + oc);
    }
    CHECK(bad == 0);
  });
}

TEMPLATE_TEST_CASE("gemm: large shapes", "[kernels][gemm][.slow]", float, double) {
  auto [M, N, K] =
      GENERATE(table<int64_t, int64_t, int64_t>({{1000, 1000, 1000}, {1031, 997, 1013}, {2048, 256, 512}}));
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const Shape s{ta, tb, M, N, K, 3, -1.5, 0.25};
  KernelStateGuard guard;
  const Problem<TestType> p(s);
  for (k::Isa isa : k::available_isas()) {
    if (isa == k::Isa::scalar) continue;  // that *is* the reference
    k::set_isa(isa);
    for (int threads : {1, 2}) {
      k::set_num_threads(threads);
      CAPTURE(describe(s), k::isa_name(isa), threads);
      CHECK(p.check() == 0);
    }
  }
}

// TeamCost: whether a GEMM takes a thread team, from the losses of recent team runs. Built here with
// the estimate on (the file's kAlwaysTeams would skip it).
#include "kernels/simd/gemm_config.hpp"

TEST_CASE("team cost: slow to give teams up after lasting losses, back at the first probe that loses little",
          "[gemm][team]") {
  using tapegrad::kernels::simd::gemm_detail::TeamCost;
  const std::string saved = std::getenv("TAPEGRAD_GEMM_TEAM") ? std::getenv("TAPEGRAD_GEMM_TEAM") : "";
  unsetenv("TAPEGRAD_GEMM_TEAM");
  TeamCost cost;
  if (!saved.empty()) setenv("TAPEGRAD_GEMM_TEAM", saved.c_str(), 1);
  const auto now = TeamCost::Clock::now();
  constexpr double kSingleUs = 1000;  // a GEMM of 1 ms on one thread: worth a team while losses stay under 500 us
  CHECK(cost.worth_it(kSingleUs));
  cost.record(now, 8000, 0);  // one outlier (a fresh team's start-up) does not switch teams off
  CHECK(cost.worth_it(kSingleUs));
  cost.record(now, 9000, 0), cost.record(now, 7000, 0);  // lasting losses do
  CHECK_FALSE(cost.worth_it(kSingleUs));
  cost.record(now, 2000, 0);  // a probe still losing a quarter of the estimate or more keeps them off
  CHECK_FALSE(cost.worth_it(kSingleUs));
  cost.record(now, 40, 0);  // a probe that lost little: the machine is quiet again, teams at once
  CHECK(cost.worth_it(kSingleUs));
  cost.record(now, 8000, 0);  // and one new outlier does not undo that
  CHECK(cost.worth_it(kSingleUs));
}

// How a team cuts C into units (gemm_driver.hpp choose_units): never so that one thread is left
// twice the other's tiles. Built for SSE2 (every x86-64 has it), whose 8-wide panels make a 48-column
// product six panels and a 40-column one five, as 384 and 320 columns are on AVX-512.
#include "kernels/simd/gemm_driver.hpp"

TEST_CASE("gemm units: a team's units split the tiles evenly", "[gemm][team]") {
  using Driver = tapegrad::kernels::simd::gemm_detail::GemmDriver<xsimd::sse2, float>;
  using Units = Driver::Units;
  static_assert(Driver::NR == 8 && Driver::MR == 6);
  // 4 units of 1, 2, 1 and 2 column panels over 64 row panels: taken in counter order, the second
  // thread ends up with 256 tiles of 384, a third more than half; 2 x 3 units of 32 x 2 are even.
  CHECK(Driver::busiest_share(64, 6, Units{1, 4}, 2) == Approx(4.0 / 3));
  CHECK(Driver::busiest_share(64, 6, Units{2, 3}, 2) == 1.0);
  CHECK(Driver::busiest_share(64, 6, Units{2, 1, true}, 2) == 1.0);
  // The cut chosen for products of 6 and 5 column panels, 25 row panels (too few for bands of rows
  // per thread): K 400, both operands in L2 and B packed, so that cutting the rows costs most; K
  // 2000, a long depth past L2 (a unit per thread). Every transpose: balanced.
  const int64_t m = 150;
  std::vector<float> a(m * 2000), b(2000 * 48), c(m * 48);
  for (const int64_t n : {48, 40})
    for (const int64_t k : {400, 2000})
      for (const bool ta : {false, true})
        for (const bool tb : {false, true}) {
          const Driver::Problem pr{m,          n,          k,          1.f,      0.f,
                                   a.data(),   ta ? 1 : k, ta ? m : 1, b.data(), tb ? 1 : n,
                                   tb ? k : 1, c.data(),   n};
          const Units u = Driver::choose_units(pr, 2);
          CAPTURE(n, k, ta, tb, u.um, u.un);
          CHECK(Driver::busiest_share((m + 5) / 6, (n + 7) / 8, u, 2) <= Driver::kMaxImbalance);
        }
}

TEST_CASE("gemm units: transposed A packed in L2 is cut into a band of rows per thread", "[gemm][team]") {
  // 96 x 200 x 96, both operands packed (A transposed past SSE2's in-place limit, B past 64 KiB),
  // together in L2. Each unit packs its own A rows for all its columns and its own B columns for all
  // its rows, so two bands of rows (A packed once, B twice) beat four units of 2 x 2 (each operand
  // twice), the cheapest cut of about two units per thread. Untransposed A is read in place: the cut
  // stays across N.
  using Driver = tapegrad::kernels::simd::gemm_detail::GemmDriver<xsimd::sse2, float>;
  const int64_t m = 96, n = 96, k = 200;
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (const bool ta : {false, true}) {
    const Driver::Problem pr{m,          n,        k, 1.f, 0.f,      a.data(), ta ? 1 : k,
                             ta ? m : 1, b.data(), n, 1,   c.data(), n};
    REQUIRE(pr.pack_a() == ta);
    REQUIRE(pr.pack_b());
    const Driver::Units u = Driver::choose_units(pr, 2);
    CAPTURE(ta, u.um, u.un);
    if (ta) {
      CHECK(u.um == 2);
      CHECK(u.un == 1);
    } else {
      CHECK(u.un > 1);
    }
    CHECK(Driver::busiest_share(m / 6, n / 8, u, 2) <= Driver::kMaxImbalance);
  }
}
