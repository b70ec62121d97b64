// Every SIMD row-wise / elementwise kernel against the scalar reference (kernels/ref/ref.hpp), for
// every instruction set this machine has (kernels::available_isas(), scalar included as a check of
// the dispatch itself) and OpenMP thread counts 1 and 2, on awkward sizes: 0, 1, lengths just below
// and above the batch widths (4, 8, 16 floats) and their multiples, and sizes large enough to cross
// the kernels' fork threshold so the parallel paths run too. Reductions are also checked to give
// bitwise the same result with 1 and 2 threads.
//
// Tolerances are stated per kernel as |got - want| <= atol + rtol * |want|, in units of
// eps = FLT_EPSILON (1.19e-7) and of the length n being reduced, next to each check. Where the SIMD
// code does the reference's arithmetic in the reference's order (binary ops, embedding, bias sums)
// the check is exact.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/ref/ref.hpp"
#include "tests/kernels/isa_config.hpp"

namespace k = tapegrad::kernels;
namespace ref = tapegrad::kernels::ref;

namespace {

constexpr double kEps = FLT_EPSILON;
constexpr float kInfF = std::numeric_limits<float>::infinity();

// The awkward lengths of the issue: 0 where meaningful, 1, around the batch widths, and large.
const std::vector<int64_t> kSizes = {0, 1, 2, 3, 7, 15, 17, 31, 33, 65, 127, 129, 257, 1000};


std::vector<float> random_vec(int64_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
  for (auto& x : v) x = d(gen);
  return v;
}

struct Tol {
  double atol, rtol;
};

bool same_special(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0));
}

// One CHECK per array: reports the worst element (index, got, want) if any is outside its limit,
// limit(i) being the allowed |got - want| at element i.
template <class T, class Limit>
void check_within(const std::vector<T>& got, const std::vector<T>& want, Limit&& limit,
                  const std::string& what) {
  REQUIRE(got.size() == want.size());
  int64_t bad = -1;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = double(got[i]), w = double(want[i]);
    if (g == w || same_special(g, w)) continue;
    const double err = std::abs(g - w), lim = limit(i);
    const double ratio = lim > 0 ? err / lim : std::numeric_limits<double>::infinity();
    if (!(err <= lim) && (bad < 0 || ratio > worst)) {
      bad = int64_t(i);
      worst = ratio;
    }
  }
  INFO(what);
  if (bad >= 0) {
    INFO("worst index " << bad << ": got " << got[size_t(bad)] << " want " << want[size_t(bad)] << " (error "
                        << worst << "x the tolerance)");
    CHECK(bad < 0);
  } else {
    CHECK(bad < 0);
  }
}

template <class T>
void check_close(const std::vector<T>& got, const std::vector<T>& want, Tol tol, const std::string& what) {
  check_within(
      got, want, [&](size_t i) { return tol.atol + tol.rtol * std::abs(double(want[i])); }, what);
}

template <class T>
void check_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  check_close(got, want, Tol{0, 0}, what);
}

// Runs `body(isa_name)` once per available ISA at the given thread count.
template <class F>
void for_each_isa(int threads, F&& body) {
  for (k::Isa isa : k::available_isas()) {
    Config cfg(isa, threads);
    const std::string name = k::isa_name(isa);
    CAPTURE(name);
    body(name);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// exp: the kernels' own polynomial (kernels/simd/math.hpp) against std::exp in double.

TEST_CASE("exp: relative error bound over the float range, edge values", "[kernels][exp]") {
  // Dense grid over the range whose results are normal floats, plus the denormal tail.
  std::vector<float> x;
  for (double v = -87.3; v <= 88.72; v += 0.000173) x.push_back(float(v));
  const int64_t n = int64_t(x.size());
  std::vector<float> y(x.size());
  for (k::Isa isa : k::available_isas()) {
    if (isa == k::Isa::scalar) continue;
    Config cfg(isa, 2);
    CAPTURE(k::isa_name(isa));
    k::unary<float>(k::Unary::exp, n, x.data(), y.data());
    double worst = 0;
    float worst_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(double(x[i]));
      const double rel = std::abs(double(y[i]) - want) / want;
      if (rel > worst) worst = rel, worst_x = x[i];
    }
    INFO("exp worst relative error " << worst / kEps << " eps at x = " << worst_x);
    // Stated bound (math.hpp): 2 ulp = 2 eps relative. Measured ~1.2 eps on every ISA.
    CHECK(worst <= 2 * kEps);

    // Edges: overflow to +inf like std::exp, gradual underflow, exact 0 far below, NaN stays NaN.
    const std::vector<float> edge = {88.7f,
                                     88.73f,
                                     100.0f,
                                     kInfF,
                                     -88.0f,
                                     -95.0f,
                                     -103.0f,
                                     -104.0f,
                                     -200.0f,
                                     -kInfF,
                                     std::numeric_limits<float>::quiet_NaN(),
                                     0.0f,
                                     -0.0f};
    std::vector<float> ye(edge.size());
    k::unary<float>(k::Unary::exp, int64_t(edge.size()), edge.data(), ye.data());
    for (size_t i = 0; i < edge.size(); ++i) {
      const float want = std::exp(edge[i]);
      CAPTURE(edge[i], ye[i], want);
      if (std::isnan(want)) {
        CHECK(std::isnan(ye[i]));
      } else if (std::isinf(want) || want == 0) {
        CHECK(ye[i] == want);
      } else {
        // normal results: 2 eps; denormal results: within 2 units of the smallest denormal
        CHECK(std::abs(double(ye[i]) - double(want)) <= std::max(2 * kEps * want, 2.0 * 0x1p-149));
      }
    }
  }
}

TEST_CASE("exp for softmax (x <= 0), seen through log_softmax_backward", "[kernels][exp]") {
  // log_softmax_backward with dy = e_0 gives dx[i] = -exp(y[i]) exactly for i >= 1: a window onto
  // the non-positive exp the softmax family uses (exp_nonpositive, one batch at a time and two
  // interleaved, both reached here: the row is long). Its whole input range: a dense grid over
  // [-87.33, 0], where results are normal floats, both sides of the flush threshold ln(FLT_MIN) =
  // -87.3365, the tiny arguments next to 0 (-0 and the smallest denormal included), and far below
  // down to -inf. Below the threshold the result may flush to 0 where std::exp returns a denormal:
  // absolute error < 1.2e-38, never negative.
  std::vector<float> y = {0.0f};
  for (double v = -87.33; v <= 0; v += 0.00031) y.push_back(float(v));
  const std::vector<float> normal_edges = {
      -87.336f, -87.3364f, -87.33f, -1e-3f, -1e-7f, -1e-30f, -std::numeric_limits<float>::denorm_min(),
      -0.0f,    0.0f};
  y.insert(y.end(), normal_edges.begin(), normal_edges.end());
  const int64_t n_normal = int64_t(y.size());
  const std::vector<float> tiny_edges = {
      -87.3366f, -87.34f, -87.5f,  -88.0f, -95.0f,
      -103.97f,  -104.0f, -200.0f, -1e30f, -std::numeric_limits<float>::max(),
      -kInfF};
  y.insert(y.end(), tiny_edges.begin(), tiny_edges.end());
  y.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = int64_t(y.size());
  std::vector<float> dy(y.size(), 0.0f);
  dy[0] = 1.0f;
  for (k::Isa isa : k::available_isas()) {
    if (isa == k::Isa::scalar) continue;
    Config cfg(isa, 1);
    CAPTURE(k::isa_name(isa));
    std::vector<float> dx(y.size(), 0.0f);
    k::log_softmax_backward<float>(1, n, y.data(), dy.data(), dx.data(), true);
    // Stated bounds (math.hpp, exp_nonpositive): 0.75 eps relative over the whole range with the
    // table reduction (AVX2, AVX-512); (1 + |x|/40) eps with SSE2's degree-6 polynomial. Reported:
    // the worst on [-10, 0] and overall.
    const bool table = isa != k::Isa::sse2;
    double worst = 0, worst_near = 0, worst_ratio = 0;
    float worst_x = 0;
    for (int64_t i = 1; i < n_normal; ++i) {
      const double yi = y[size_t(i)], want = std::exp(yi);
      const double rel = std::abs(-double(dx[size_t(i)]) - want) / want;
      worst = std::max(worst, rel);
      if (yi >= -10) worst_near = std::max(worst_near, rel);
      const double bound = table ? 0.75 * kEps : (1 + std::abs(yi) / 40) * kEps;
      if (rel / bound > worst_ratio) worst_ratio = rel / bound, worst_x = float(yi);
    }
    INFO("exp (x <= 0) worst relative error "
         << worst / kEps << " eps overall, " << worst_near / kEps
         << " eps on [-10, 0]; worst against the bound at x = " << worst_x);
    CHECK(worst_ratio <= 1.0);
    // Below FLT_MIN: the denormal or 0 (flushed); -inf: exactly 0; NaN stays NaN.
    for (int64_t i = n_normal; i < n - 1; ++i) {
      CAPTURE(y[size_t(i)], dx[size_t(i)]);
      CHECK(-dx[size_t(i)] >= 0.0f);
      CHECK(std::abs(double(dx[size_t(i)]) - -std::exp(double(y[size_t(i)]))) < 1.2e-38);
    }
    CHECK(dx[size_t(n - 2)] == 0.0f);
    CHECK(std::isnan(dx[size_t(n - 1)]));
  }
}

// ---------------------------------------------------------------------------------------------
// Elementwise

namespace {
struct UnaryCase {
  k::Unary op;
  const char* name;
  float lo, hi;  // input domain
  Tol fwd, bwd;  // in units of eps; atol is scaled by max(1, |x|) for the gelus (see below)
};

// Forward: exp, sigmoid use our exp (2 eps) plus one division; log, tanh, erf are xsimd's (a few
// ulp). The gelus take atol ~ 8 eps * |x| because the reference's 1 + tanh(u) cancels for
// negative x (the reference itself is off by that much). Backward: one more multiply-add on top.
const std::vector<UnaryCase> kUnaryCases = {
    {k::Unary::neg, "neg", -5, 5, {0, 0}, {0, 0}},
    {k::Unary::exp, "exp", -20, 20, {0, 4 * kEps}, {0, 6 * kEps}},
    {k::Unary::log, "log", 0.01f, 50, {2 * kEps, 4 * kEps}, {0, 4 * kEps}},
    {k::Unary::sqrt, "sqrt", 0.01f, 50, {0, 0}, {0, 4 * kEps}},
    {k::Unary::abs, "abs", -5, 5, {0, 0}, {0, 0}},
    {k::Unary::tanh, "tanh", -6, 6, {2 * kEps, 8 * kEps}, {4 * kEps, 8 * kEps}},
    {k::Unary::sigmoid, "sigmoid", -20, 20, {kEps, 6 * kEps}, {2 * kEps, 8 * kEps}},
    {k::Unary::relu, "relu", -5, 5, {0, 0}, {0, 0}},
    {k::Unary::gelu_tanh, "gelu_tanh", -6, 6, {8 * kEps, 8 * kEps}, {16 * kEps, 16 * kEps}},
    {k::Unary::gelu_erf, "gelu_erf", -6, 6, {8 * kEps, 8 * kEps}, {16 * kEps, 16 * kEps}},
    {k::Unary::softplus, "softplus", -30, 30, {0, 4 * kEps}, {2 * kEps, 8 * kEps}},
};
}  // namespace

TEST_CASE("unary and unary_backward match the reference", "[kernels][elementwise]") {
  const int threads = GENERATE(1, 2);
  // Without accumulate the gradient buffer starts as NaN: it must be written, never read.
  const bool accumulate = GENERATE(true, false);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()), int64_t(40000));
  for (const UnaryCase& uc : kUnaryCases) {
    CAPTURE(uc.name, n, threads, accumulate);
    auto x = random_vec(n, uc.lo, uc.hi, 11);
    if (uc.op == k::Unary::relu || uc.op == k::Unary::abs)
      for (int64_t i = 0; i < n; i += 5) x[size_t(i)] = 0.0f;  // the kink
    std::vector<float> want(static_cast<size_t>(n)), dx_want = random_vec(n, -1, 1, 12);
    const auto dy = random_vec(n, -1, 1, 13);
    const auto dx0 =
        accumulate ? dx_want : std::vector<float>(size_t(n), std::numeric_limits<float>::quiet_NaN());
    ref::unary<float>(uc.op, n, x.data(), want.data());
    ref::unary_backward<float>(uc.op, n, x.data(), want.data(), dy.data(), dx_want.data(), accumulate);
    for_each_isa(threads, [&](const std::string&) {
      std::vector<float> got(static_cast<size_t>(n)), dx = dx0;
      k::unary<float>(uc.op, n, x.data(), got.data());
      const bool gelu = uc.op == k::Unary::gelu_tanh || uc.op == k::Unary::gelu_erf;
      const double scale = gelu ? 6.0 : 1.0;  // |x| <= 6
      check_close(got, want, Tol{uc.fwd.atol * scale, uc.fwd.rtol}, "forward");
      // backward from the reference's y, so only the derivative is under test
      k::unary_backward<float>(uc.op, n, x.data(), want.data(), dy.data(), dx.data(), accumulate);
      check_close(dx, dx_want, Tol{uc.bwd.atol * scale + 2 * kEps, uc.bwd.rtol}, "backward");
    });
  }
}

// gelu_tanh against the formula in double over a dense grid that reaches where the result
// underflows (x < -10) and saturates (x > 6), plus special values. With z = |2u|, the exp's
// argument: an error of d relative in the computed 2u moves exp(-z) by z d relative, so for x < 0
// (y ~ x e^-z) the bound grows with z; for x > 0 it does not (y = x / (1 + e^-z)). Stated bound
// (elementwise.hpp, gelu_sigmoid): forward within (4 + 2z) eps |y|, backward within
// (8 + 4z) eps times the sum of its terms' sizes |s| + |x s (1 - s) d(2u)/dx|, plus, where exp(-z)
// is flushed to 0 below FLT_MIN, 2 |x| FLT_MIN (forward) and 2 |x| FLT_MIN d(2u)/dx (backward).
TEST_CASE("gelu_tanh against double: error bound, saturation, underflow, special values",
          "[kernels][elementwise]") {
  constexpr double kA = 2 * 0.7978845608028654, kB = kA * 0.044715;
  std::vector<float> x;
  for (double v = -14; v <= 14; v += 0.00037) x.push_back(float(v));
  const size_t grid = x.size();
  for (float v : {-100.0f, -30.0f, 30.0f, 100.0f, 0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, -1e-40f})
    x.push_back(v);
  const size_t finite = x.size();
  for (float v : {kInfF, -kInfF, std::numeric_limits<float>::quiet_NaN(), 1e30f, -1e30f}) x.push_back(v);
  const int64_t n = int64_t(x.size());
  for_each_isa(GENERATE(1, 2), [&](const std::string& isa) {
    if (isa == "scalar") return;  // the reference itself: its 1 +- tanh(u) cancel (see kUnaryCases)
    std::vector<float> y(x.size()), dx(x.size(), 0.0f);
    const std::vector<float> dy(x.size(), 1.0f);
    k::unary<float>(k::Unary::gelu_tanh, n, x.data(), y.data());
    k::unary_backward<float>(k::Unary::gelu_tanh, int64_t(finite), x.data(), y.data(), dy.data(), dx.data(),
                             false);
    double worst_f = 0, worst_b = 0;
    size_t at_f = 0, at_b = 0;
    for (size_t i = 0; i < finite; ++i) {
      const double v = x[i], two_u = v * (kA + kB * v * v), z = std::abs(two_u);
      const double sg = 1 / (1 + std::exp(-two_u)), want = v * sg;
      const double slope = kA + 3 * kB * v * v, term = v * sg * (1 - sg) * slope, dwant = sg + term;
      const double lim_f = (4 + 2 * z) * kEps * std::abs(want) + 2 * std::abs(v) * FLT_MIN;
      const double lim_b = (8 + 4 * z) * kEps * (sg + std::abs(term)) + 2 * std::abs(v) * FLT_MIN * slope;
      const double ef = std::abs(double(y[i]) - want), eb = std::abs(double(dx[i]) - dwant);
      const double rf = ef == 0 ? 0 : ef / lim_f, rb = eb == 0 ? 0 : eb / lim_b;  // NaN fails below
      if (!(rf <= worst_f)) worst_f = rf, at_f = i;
      if (!(rb <= worst_b)) worst_b = rb, at_b = i;
    }
    INFO("forward: worst " << worst_f << "x the bound at x = " << x[at_f] << " (got " << y[at_f] << ")");
    INFO("backward: worst " << worst_b << "x the bound at x = " << x[at_b] << " (got " << dx[at_b] << ")");
    CHECK(worst_f <= 1.0);
    CHECK(worst_b <= 1.0);
    CHECK(grid > 70000);
    // Specials as the reference formula in float: inf -> inf, -inf -> NaN (-inf * 0), NaN -> NaN,
    // and the cube overflowing for |x| = 1e30 still saturates: 1e30 and -0.
    const size_t s = finite;
    CHECK(y[s] == kInfF);
    CHECK(std::isnan(y[s + 1]));
    CHECK(std::isnan(y[s + 2]));
    CHECK(y[s + 3] == 1e30f);
    CHECK(y[s + 4] == 0.0f);
  });
}

// tanh against double over a dense grid of [-10, 10], where the kernel switches from its series
// (|x| < 0.3) to (1 - e) / (1 + e), and saturates; plus special values. Stated bound (math.hpp):
// within 2 eps of |tanh(x)|, and exactly +-1 past saturation, +-0 at +-0, NaN for NaN.
TEST_CASE("tanh against double: error bound across the series/exp switch, saturation, specials",
          "[kernels][elementwise]") {
  std::vector<float> x;
  for (double v = -10; v <= 10; v += 0.000131) x.push_back(float(v));
  for (float v : {0.3f, -0.3f, std::nextafter(0.3f, 0.0f), 1e-30f, -1e-30f, 1e-40f, 30.0f, -30.0f})
    x.push_back(v);
  const size_t finite = x.size();
  for (float v : {kInfF, -kInfF, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f}) x.push_back(v);
  for_each_isa(GENERATE(1, 2), [&](const std::string&) {
    std::vector<float> y(x.size());
    k::unary<float>(k::Unary::tanh, int64_t(x.size()), x.data(), y.data());
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < finite; ++i) {
      const double want = std::tanh(double(x[i])), err = std::abs(double(y[i]) - want);
      const double r = err == 0 ? 0 : err / (2 * kEps * std::abs(want));  // NaN fails below
      if (!(r <= worst)) worst = r, at = i;
    }
    INFO("worst " << worst << "x the bound at x = " << x[at] << " (got " << y[at] << ")");
    CHECK(worst <= 1.0);
    const size_t s = finite;
    CHECK(y[s] == 1.0f);
    CHECK(y[s + 1] == -1.0f);
    CHECK(std::isnan(y[s + 2]));
    CHECK((y[s + 3] == 0.0f && !std::signbit(y[s + 3])));
    CHECK((y[s + 4] == 0.0f && std::signbit(y[s + 4])));
  });
}

// Outputs of at least half the L3 are written with streaming stores (the elementwise kernels' flat
// blocks, when y is batch-aligned): every op, the same tolerances as above, an odd length so the last
// block ends in a partial batch, y pre-filled so an element left unwritten shows. A y one float off
// alignment takes the ordinary stores and must agree too.
TEST_CASE("unary ops on outputs large enough for streaming stores", "[kernels][elementwise]") {
  const int threads = GENERATE(1, 2);
  const int64_t n = k::cache_info().l3 / 2 / 4 + 13;
  std::vector<float> buf(size_t(n) + 17);
  float* aligned = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) % 64) / 4) % 16;
  for (const UnaryCase& uc : kUnaryCases) {
    const auto x = random_vec(n, uc.lo, uc.hi, 21);
    std::vector<float> want(static_cast<size_t>(n));
    ref::unary<float>(uc.op, n, x.data(), want.data());
    const bool gelu = uc.op == k::Unary::gelu_tanh || uc.op == k::Unary::gelu_erf;
    const double scale = gelu ? 6.0 : 1.0;  // |x| <= 6
    for (int offset : {0, 1}) {
      if (offset == 1 && uc.op != k::Unary::gelu_tanh) continue;
      CAPTURE(uc.name, n, threads, offset);
      float* y = aligned + offset;
      for_each_isa(threads, [&](const std::string&) {
        std::fill(y, y + n, 99.0f);
        k::unary<float>(uc.op, n, x.data(), y);
        check_close(std::vector<float>(y, y + n), want, Tol{uc.fwd.atol * scale, uc.fwd.rtol}, "forward");
      });
    }
  }
}

// softplus where the naive log(1 + exp(x)) fails: exp(x) overflows float above 88.7 (and double
// above 709), and 1 + exp(x) rounds to 1 below -17, losing the result e^x. Both the reference and the
// dispatched kernel are checked against the naive formula evaluated in double, where it is exact
// enough for |x| < 700 (beyond, the answer is max(x, 0) exactly), and so is the derivative sigmoid(x).
// Results below FLT_MIN are denormals: allowed 4 of their ulps (5.6e-45) on top of the relative limit.
TEST_CASE("softplus for large |x|: no overflow, no lost tail, against double", "[kernels][elementwise]") {
  const int threads = GENERATE(1, 2);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()), int64_t(40000));
  CAPTURE(n, threads);
  const std::vector<float> edges = {0.0f,    1e-30f,   -1e-30f, 1.0f,   -1.0f,   17.0f,   -17.0f,
                                    20.0f,   -20.0f,   30.0f,   -30.0f, 88.7f,   -88.7f,  89.0f,
                                    -89.0f,  100.0f,   -100.0f, 103.9f, -103.9f, 1000.0f, -1000.0f,
                                    FLT_MAX, -FLT_MAX, kInfF,   -kInfF};
  auto x = random_vec(n, -120, 120, 21);
  for (int64_t i = 0; i < n; i += 3) x[size_t(i)] = edges[size_t(i / 3) % edges.size()];
  const auto dy = random_vec(n, -1, 1, 22);
  const auto dx0 = random_vec(n, -1, 1, 23);
  std::vector<float> y_want(static_cast<size_t>(n)), dx_want(static_cast<size_t>(n));
  for (size_t i = 0; i < size_t(n); ++i) {
    const double xi = x[i];
    y_want[i] = float(std::abs(xi) < 700 ? std::log1p(std::exp(xi)) : std::max(xi, 0.0));
    dx_want[i] = float(double(dx0[i]) + double(dy[i]) / (1 + std::exp(-xi)));
  }
  const Tol fwd{4 * double(FLT_TRUE_MIN), 4 * kEps}, bwd{2 * kEps, 4 * kEps};
  std::vector<float> y_ref(static_cast<size_t>(n)), dx_ref = dx0;
  ref::unary<float>(k::Unary::softplus, n, x.data(), y_ref.data());
  ref::unary_backward<float>(k::Unary::softplus, n, x.data(), y_ref.data(), dy.data(), dx_ref.data(), true);
  check_close(y_ref, y_want, fwd, "reference forward");
  check_close(dx_ref, dx_want, bwd, "reference backward");
  for_each_isa(threads, [&](const std::string&) {
    std::vector<float> y(static_cast<size_t>(n)), dx = dx0;
    k::unary<float>(k::Unary::softplus, n, x.data(), y.data());
    k::unary_backward<float>(k::Unary::softplus, n, x.data(), y.data(), dy.data(), dx.data(), true);
    check_close(y, y_want, fwd, "forward");
    check_close(dx, dx_want, bwd, "backward");
  });
}

TEST_CASE("affine matches the reference", "[kernels][elementwise]") {
  const int threads = GENERATE(1, 2);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()), int64_t(70001));
  const bool accumulate = GENERATE(false, true);
  CAPTURE(n, threads, accumulate);
  const auto x = random_vec(n, -2, 2, 21), y0 = random_vec(n, -2, 2, 22);
  auto want = y0;
  ref::affine<float>(n, x.data(), 1.5f, -0.25f, want.data(), accumulate);
  for_each_isa(threads, [&](const std::string&) {
    auto got = y0;
    k::affine<float>(n, x.data(), 1.5f, -0.25f, got.data(), accumulate);
    // at most one fused rounding differs: 2 eps of the terms' size (|terms| <= 5.25)
    check_close(got, want, Tol{2 * kEps * 5.25, 0}, "affine");
  });
}

// The SIMD masks are the reference's bit for bit (the same counter-based draws, kernels/counter_rng.hpp)
// and the kept values the same single multiply, so the check is exact; a dropped element is 0 even
// where x is inf or NaN. 70001 elements cross the fork threshold and several flat blocks, each of which
// starts its counters at its own offset.
TEST_CASE("dropout matches the reference exactly", "[kernels][elementwise]") {
  const int threads = GENERATE(1, 2);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()), int64_t(70001));
  const double p = GENERATE(0.0, 0.1, 0.5, 0.9);
  const uint64_t seed = GENERATE(uint64_t(0), uint64_t(0x123456789abcdefull));
  const bool accumulate = GENERATE(false, true);
  CAPTURE(n, threads, p, seed, accumulate);
  auto x = random_vec(n, -2, 2, 31);
  if (n > 3) x[1] = kInfF, x[2] = std::numeric_limits<float>::quiet_NaN();
  const auto y0 = random_vec(n, -2, 2, 32);
  auto want = y0;
  ref::dropout<float>(n, x.data(), p, seed, want.data(), accumulate);
  for_each_isa(threads, [&](const std::string&) {
    auto got = y0;
    k::dropout<float>(n, x.data(), p, seed, got.data(), accumulate);
    check_equal(got, want, "dropout");
  });
  // The share kept is 1 - p within 5 standard deviations of a binomial count.
  if (n >= 1000 && !accumulate) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += want[size_t(i)] != 0.0f;
    CHECK(std::abs(double(kept) - (1 - p) * double(n)) <= 5 * std::sqrt(p * (1 - p) * double(n)) + 1);
  }
}

namespace {
// A broadcasting case: output shape and each operand's shape (1 on broadcast dims) and layout.
struct BinaryCase {
  const char* name;
  std::vector<int64_t> shape;
  std::vector<int64_t> a_shape, b_shape;
  bool a_transposed;  // a stored with its last two dims swapped (a general strided operand)
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = shape[d] == 1 ? 0 : acc;  // a size-1 dim of an operand broadcasts: stride 0
    acc *= shape[d];
  }
  return s;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<BinaryCase> binary_cases(int64_t n) {
  return {
      {"same-shape", {n}, {n}, {n}, false},
      {"scalar b", {3, n}, {3, n}, {1, 1}, false},
      {"scalar a", {n}, {1}, {n}, false},
      {"row broadcast b", {5, n}, {5, n}, {1, n}, false},
      {"row broadcast a", {2, 3, n}, {1, 1, n}, {2, 3, n}, false},
      {"column broadcast b", {4, n}, {4, n}, {4, 1}, false},
      {"middle broadcast", {2, 3, n}, {2, 3, n}, {2, 1, n}, false},
      {"transposed a", {3, n}, {3, n}, {1, n}, true},
      {"transposed a, column b", {n, 3}, {n, 3}, {n, 1}, true},
  };
}
}  // namespace

TEST_CASE("binary and binary_backward match the reference exactly", "[kernels][elementwise]") {
  // add/sub/mul/div are single IEEE operations in both paths, and the derivatives are the same
  // expressions (1/b, -a/(b*b)), so the results must be identical; pow uses std::pow in both.
  const int threads = GENERATE(1, 2);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()), int64_t(20000));
  for (const BinaryCase& bc : binary_cases(n)) {
    const int ndim = int(bc.shape.size());
    auto sa = contiguous_strides(bc.a_shape), sb = contiguous_strides(bc.b_shape);
    if (bc.a_transposed) {  // a stored as [.., last, second-to-last]
      const int64_t r = bc.a_shape[size_t(ndim - 2)], c = bc.a_shape[size_t(ndim - 1)];
      sa[size_t(ndim - 2)] = r == 1 ? 0 : 1;
      sa[size_t(ndim - 1)] = c == 1 ? 0 : r;
    }
    const int64_t total = numel(bc.shape);
    // b in [0.5, 2] keeps div and pow (positive base) well conditioned
    const auto a = random_vec(numel(bc.a_shape), 0.5f, 2.0f, 31),
               b = random_vec(numel(bc.b_shape), 0.5f, 2.0f, 32);
    const auto dy = random_vec(total, -1, 1, 33);
    for (k::Binary op : {k::Binary::add, k::Binary::sub, k::Binary::mul, k::Binary::div, k::Binary::pow}) {
      CAPTURE(bc.name, n, threads, int(op));
      std::vector<float> want(static_cast<size_t>(total)), ga_want(static_cast<size_t>(total)),
          gb_want(static_cast<size_t>(total));
      ref::binary<float>(op, ndim, bc.shape.data(), a.data(), sa.data(), b.data(), sb.data(), want.data());
      ref::binary_backward<float>(op, 0, ndim, bc.shape.data(), a.data(), sa.data(), b.data(), sb.data(),
                                  dy.data(), ga_want.data());
      ref::binary_backward<float>(op, 1, ndim, bc.shape.data(), a.data(), sa.data(), b.data(), sb.data(),
                                  dy.data(), gb_want.data());
      for_each_isa(threads, [&](const std::string&) {
        std::vector<float> got(static_cast<size_t>(total)), ga(static_cast<size_t>(total)),
            gb(static_cast<size_t>(total));
        k::binary<float>(op, ndim, bc.shape.data(), a.data(), sa.data(), b.data(), sb.data(), got.data());
        k::binary_backward<float>(op, 0, ndim, bc.shape.data(), a.data(), sa.data(), b.data(), sb.data(),
                                  dy.data(), ga.data());
        k::binary_backward<float>(op, 1, ndim, bc.shape.data(), a.data(), sa.data(), b.data(), sb.data(),
                                  dy.data(), gb.data());
        check_equal(got, want, "binary");
        check_equal(ga, ga_want, "d/da");
        check_equal(gb, gb_want, "d/db");
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions

namespace {
struct SumToCase {
  const char* name;
  std::vector<int64_t> shape, out_shape;  // out_shape has 1 on the reduced dims
};
}  // namespace

TEST_CASE("sum_to matches the reference", "[kernels][reduce]") {
  // Bias-style column sums add rows in the reference's order (exact); other patterns reorder a sum
  // of m terms: |error| <= m * eps * max|x| (m = elements per output, |x| <= 1).
  const int threads = GENERATE(1, 2);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  const std::vector<SumToCase> cases = {
      {"all", {7, n}, {1, 1}},           {"bias", {33, n}, {1, n}},
      {"rows", {n, 9}, {n, 1}},          {"none", {3, n}, {3, n}},
      {"middle", {2, n, 5}, {2, 1, 5}},  {"outer+inner", {3, n, 4}, {1, n, 1}},
      {"bias 3d", {4, 9, n}, {1, 1, n}}, {"big bias", {300, n}, {1, n}},
  };
  for (const SumToCase& sc : cases) {
    CAPTURE(sc.name, n, threads);
    const int ndim = int(sc.shape.size());
    const auto os = contiguous_strides(sc.out_shape);
    const int64_t total = numel(sc.shape), outs = numel(sc.out_shape), m = outs > 0 ? total / outs : 0;
    const auto x = random_vec(total, -1, 1, 41);
    const auto out0 = random_vec(numel(sc.out_shape), -1, 1, 42);
    auto want = out0;
    ref::sum_to<float>(ndim, sc.shape.data(), x.data(), os.data(), want.data());
    std::vector<float> first;
    for_each_isa(threads, [&](const std::string&) {
      auto got = out0;
      k::sum_to<float>(ndim, sc.shape.data(), x.data(), os.data(), got.data());
      check_close(got, want, Tol{double(m + 1) * kEps, 0}, "sum_to");
    });
  }
}

TEST_CASE("sum_axis and max_axis match the reference", "[kernels][reduce]") {
  // sum_axis with inner > 1 adds k in the reference's order (exact), except one long column sum
  // (outer 1, n 1000 here), which adds blocks of 256 rows; inner == 1 reorders too: |error| <=
  // n * eps * max|x|. max_axis is exact, argmax included (first maximum wins).
  const int threads = GENERATE(1, 2);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  for (auto [outer, inner] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 1}, {3, 7}, {2, 33}, {129, 1}, {1, 100}}) {
    CAPTURE(outer, n, inner, threads);
    auto x = random_vec(outer * n * inner, -1, 1, 51);
    for (size_t i = 3; i < x.size(); i += 7) x[i] = x[i - 3];  // ties for argmax
    std::vector<float> want(static_cast<size_t>(outer * inner)), mwant(static_cast<size_t>(outer * inner));
    std::vector<int64_t> awant(static_cast<size_t>(outer * inner));
    ref::sum_axis<float>(outer, n, inner, x.data(), want.data());
    if (n > 0) ref::max_axis<float>(outer, n, inner, x.data(), mwant.data(), awant.data());
    for_each_isa(threads, [&](const std::string&) {
      std::vector<float> got(want.size()), mgot(want.size());
      std::vector<int64_t> agot(want.size());
      k::sum_axis<float>(outer, n, inner, x.data(), got.data());
      check_close(got, want, Tol{double(n) * kEps, 0}, "sum_axis");
      if (n == 0) return;  // a max over nothing is undefined (the reference reads x[0])
      k::max_axis<float>(outer, n, inner, x.data(), mgot.data(), agot.data());
      check_equal(mgot, mwant, "max_axis");
      check_equal(agot, awant, "argmax");
    });
  }
}

TEST_CASE("sum_all and sum_squares match the reference and are thread-count independent",
          "[kernels][reduce]") {
  // Reference: one double accumulator. SIMD: float lanes over 1024-element blocks, blocks in double,
  // so the error is that of <= 256 float additions per lane: 64 eps of the sum of the terms'
  // magnitudes covers it with margin (for sum_squares, whose terms are positive, that is the sum:
  // a relative bound).
  const bool squares = GENERATE(false, true);
  const int64_t n = GENERATE(from_range(kSizes.begin(), kSizes.end()), int64_t(100003), int64_t(1) << 20);
  CAPTURE(squares, n);
  const auto x = random_vec(n, -2, 2, squares ? 61 : 62);
  auto sum = [&](auto kernel_sum_all, auto kernel_sum_squares) {
    return squares ? kernel_sum_squares(n, x.data()) : kernel_sum_all(n, x.data());
  };
  const float want = sum(ref::sum_all<float>, ref::sum_squares<float>);
  double magnitude = 0;
  for (float v : x) magnitude += squares ? double(v) * double(v) : std::abs(double(v));
  for (k::Isa isa : k::available_isas()) {
    CAPTURE(k::isa_name(isa));
    float one, two;
    {
      Config cfg(isa, 1);
      one = sum(k::sum_all<float>, k::sum_squares<float>);
    }
    {
      Config cfg(isa, 2);
      two = sum(k::sum_all<float>, k::sum_squares<float>);
    }
    CHECK(one == two);
    CHECK(std::abs(double(one) - want) <= 64 * kEps * magnitude + 1e-30);
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax family

namespace {
struct SoftmaxCase {
  const char* name;
  double scale;
  bool mask, causal;
  int64_t period, offset;
  float lo, hi;  // logit range
};
const std::vector<SoftmaxCase> kSoftmaxCases = {
    {"plain", 1.0, false, false, 0, 0, -5, 5},
    {"scaled", 0.125, false, false, 0, 0, -20, 20},
    {"mask", 1.0, true, false, 0, 0, -5, 5},
    {"scaled mask", 0.35, true, false, 0, 0, -5, 5},
    {"causal", 1.0, false, true, 0, 0, -5, 5},
    {"causal period 3 offset 2", 0.5, true, true, 3, 2, -5, 5},
    {"causal offset -1 (masked rows)", 1.0, false, true, 4, -1, -5, 5},
    {"wide range (underflow)", 1.0, false, false, 0, 0, -200, 50},
};
}  // namespace

TEST_CASE("softmax matches the reference", "[kernels][softmax]") {
  // y = e / sum(e): exp within 2 eps, the sum reordered (n eps worst, relative, all terms positive),
  // one division. rtol = (8 + n/4) eps; atol 1e-37 covers entries the SIMD exp flushes to 0 where
  // std::exp gives a denormal.
  const int threads = GENERATE(1, 2);
  const int64_t cols = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  const int64_t rows = GENERATE(1, 3, 67);
  for (const SoftmaxCase& sc : kSoftmaxCases) {
    CAPTURE(sc.name, rows, cols, threads);
    const auto x = random_vec(rows * cols, sc.lo, sc.hi, 71);
    const int64_t mask_rows = 5;
    auto mask = random_vec(mask_rows * cols, -2, 0, 72);
    for (size_t i = 0; i < mask.size(); i += 3) mask[i] = -kInfF;
    if (cols > 0)
      for (int64_t c = 0; c < cols; ++c) mask[size_t(2 * cols + c)] = -kInfF;  // mask row 2: all masked
    k::SoftmaxOptions o;
    o.scale = sc.scale;
    if (sc.mask) o.mask = mask.data(), o.mask_rows = mask_rows;
    o.causal = sc.causal;
    o.causal_period = sc.period;
    o.causal_offset = sc.offset;
    std::vector<float> want(x.size());
    ref::softmax<float>(rows, cols, x.data(), want.data(), o);
    for_each_isa(threads, [&](const std::string&) {
      std::vector<float> got(x.size(), 99.0f);
      k::softmax<float>(rows, cols, x.data(), got.data(), o);
      check_close(got, want, Tol{1e-37, (8 + double(cols) / 4) * kEps}, "softmax");
    });
  }
}

TEST_CASE("softmax on outputs large enough for streaming stores", "[kernels][softmax]") {
  // Plain softmax writes y with streaming stores once y is at least half the L3 and rows are
  // batch-aligned (kernels/simd/softmax.hpp, stream_output); here rows x 1024 with y just over that
  // size, an odd row count (uneven split across threads), rows of -inf and one very wide row.
  // Same tolerance as above.
  const int threads = GENERATE(1, 2);
  const int64_t cols = 1024;
  const int64_t rows = k::cache_info().l3 / 2 / (cols * 4) + 3;
  CAPTURE(rows, cols, threads);
  auto x = random_vec(rows * cols, -6, 6, 75);
  for (int64_t c = 0; c < cols; ++c) x[size_t(5 * cols + c)] = -kInfF;     // row 5: all -inf
  for (int64_t c = 0; c < cols; c += 2) x[size_t(7 * cols + c)] = -kInfF;  // row 7: half -inf
  x[size_t(9 * cols)] = -500.0f;  // row 9: one entry far below the max (clamped exp)
  std::vector<float> want(x.size());
  ref::softmax<float>(rows, cols, x.data(), want.data(), {});
  std::vector<float> buf(x.size() + 16);
  float* y = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) % 64) / 4) % 16;  // 64-byte aligned
  for_each_isa(threads, [&](const std::string&) {
    std::fill(y, y + x.size(), 99.0f);
    k::softmax<float>(rows, cols, x.data(), y, {});
    check_close(std::vector<float>(y, y + x.size()), want, Tol{1e-37, (8 + double(cols) / 4) * kEps},
                "softmax (streamed)");
  });
}

TEST_CASE("softmax_backward, log_softmax and log_softmax_backward match the reference",
          "[kernels][softmax]") {
  // softmax_backward: dot reordered (cols eps * sum|dy y|), one fma: atol (4 + cols/4) eps * max|dy|.
  // log_softmax: y = x - lse, lse within a few eps of |lse|: atol 4 eps * (|x| + |lse|) ~ 64 eps.
  // log_softmax_backward: sum(dy) reordered, exp 2 eps: atol (4 + cols/4) eps * max|dy|.
  // Without accumulate the gradient buffer starts as NaN: it must be written, never read.
  const int threads = GENERATE(1, 2);
  const int64_t cols = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  const int64_t rows = GENERATE(1, 3, 67);
  const bool accumulate = GENERATE(true, false);
  CAPTURE(rows, cols, threads, accumulate);
  const auto x = random_vec(rows * cols, -8, 8, 81);
  const auto dy = random_vec(rows * cols, -1, 1, 82);
  const auto dx0 = accumulate ? random_vec(rows * cols, -1, 1, 83)
                              : std::vector<float>(x.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> y(x.size()), ly(x.size());
  ref::softmax<float>(rows, cols, x.data(), y.data(), {});
  ref::log_softmax<float>(rows, cols, x.data(), ly.data());
  auto sb_want = dx0, lb_want = dx0;
  ref::softmax_backward<float>(rows, cols, y.data(), dy.data(), sb_want.data(), 0.7, accumulate);
  ref::log_softmax_backward<float>(rows, cols, ly.data(), dy.data(), lb_want.data(), accumulate);
  const double red = (4 + double(cols) / 4) * kEps;
  for_each_isa(threads, [&](const std::string&) {
    auto sb = dx0, lb = dx0;
    std::vector<float> lgot(x.size());
    k::softmax_backward<float>(rows, cols, y.data(), dy.data(), sb.data(), 0.7, accumulate);
    check_close(sb, sb_want, Tol{red, 0}, "softmax_backward");
    k::log_softmax<float>(rows, cols, x.data(), lgot.data());
    check_close(lgot, ly, Tol{64 * kEps, 0}, "log_softmax");
    k::log_softmax_backward<float>(rows, cols, ly.data(), dy.data(), lb.data(), accumulate);
    check_close(lb, lb_want, Tol{red, 0}, "log_softmax_backward");
  });
}

TEST_CASE("cross_entropy matches the reference", "[kernels][softmax]") {
  // Both paths compute lse = max + log(sum exp(x - max)) in float; the reference's sequential sum of
  // V terms carries up to V/2 eps relative error, log and the final add 2 eps * |lse| (|lse| <= 17
  // here), so |delta lse| <= (8 + 2|lse| + V/8) eps =: dl.
  // loss = (1-e)(lse - x_t) + e/V (V lse - sum x): |error| <= 2 dl + e * 4V eps (sum x reordered,
  // |x| <= 8), plus a few eps of |loss|.
  // grad = s (p - e/V - (1-e)[v==t]) with p = exp(x - lse): p is off by dl relative, and the
  // subtraction can cancel, so the limit is absolute in the terms: s (dl p + 4 eps (p + e/V + 1 - e)).
  const int threads = GENERATE(1, 2);
  const int64_t V = GENERATE(from_range(kSizes.begin() + 1, kSizes.end()), int64_t(5003));
  const int64_t rows = GENERATE(1, 7, 40);
  const double smoothing = GENERATE(0.0, 0.1);
  const bool with_grad = GENERATE(true, false);
  CAPTURE(rows, V, smoothing, with_grad, threads);
  const auto x = random_vec(rows * V, -8, 8, 91);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  std::mt19937 gen(92);
  for (auto& v : t) v = int32_t(gen() % uint32_t(V));
  for (int64_t r = 2; r < rows; r += 3) t[size_t(r)] = -100;  // ignored
  std::vector<float> loss_want(static_cast<size_t>(rows)), grad_want(x.size());
  const double gs = 0.25;
  const int64_t cnt_want = ref::cross_entropy<float>(rows, V, x.data(), t.data(), -100, smoothing,
                                                     loss_want.data(), grad_want.data(), gs);
  const double dl = (8 + 2 * 17 + double(V) / 8) * kEps;
  const double smooth = smoothing / double(V);
  for_each_isa(threads, [&](const std::string&) {
    std::vector<float> loss(static_cast<size_t>(rows), 99.0f), grad(x.size(), 99.0f);
    const int64_t cnt = k::cross_entropy<float>(rows, V, x.data(), t.data(), -100, smoothing, loss.data(),
                                                with_grad ? grad.data() : nullptr, gs);
    CHECK(cnt == cnt_want);
    check_within(
        loss, loss_want,
        [&](size_t i) {
          return 2 * dl + smoothing * 4 * double(V) * kEps + 4 * kEps * std::abs(double(loss_want[i]));
        },
        "row loss");
    if (!with_grad) return;
    check_within(
        grad, grad_want,
        [&](size_t i) {
          const int64_t r = int64_t(i) / V, v = int64_t(i) % V;
          if (t[size_t(r)] == -100) return 0.0;
          const double on = v == t[size_t(r)] ? 1 - smoothing : 0.0;
          const double p = double(grad_want[i]) / gs + smooth + on;
          return gs * (dl * std::abs(p) + 4 * kEps * (std::abs(p) + smooth + on));
        },
        "grad");
  });
}

// ---------------------------------------------------------------------------------------------
// Layer norm

TEST_CASE("layer_norm forward and backward match the reference", "[kernels][norm]") {
  // The row sums are reordered: mean within s = (4 + 2 sqrt(cols)) eps of max|x| (the random-walk
  // size of a reordered sum of cols terms, with 2x margin; the worst case would be cols/2 eps), rstd
  // within 4s. An error of s max|x| in the mean moves xhat = (x - mean) rstd by s max|x| rstd,
  // which is large when the row's spread is small next to its values (here mean ~ 10), so per row:
  //   y, dx: 4 s (max|x| rstd + max|xhat|) max|gamma|
  //   dgamma: rows terms of size |dy| |xhat|, each off by the row's limit, plus their reordering;
  //   dbeta: rows terms of size <= 1, added in blocks: (rows + 1) eps.
  const int threads = GENERATE(1, 2);
  const int64_t cols = GENERATE(from_range(kSizes.begin() + 1, kSizes.end()));
  const int64_t rows = GENERATE(1, 3, 130);
  const int affine = GENERATE(0, 1, 2, 3);  // bit 0: gamma, bit 1: beta
  CAPTURE(rows, cols, affine, threads);
  auto x = random_vec(rows * cols, -3, 3, 101);
  for (auto& v : x) v += 10.0f;  // an offset mean: the variance must not cancel
  // Every third row starts with an outlier: the kernel's one-pass variance is shifted by the row's
  // first element and must fall back to the centred two-pass one when that shift is poor.
  for (int64_t r = 1; r < rows; r += 3) x[size_t(r * cols)] = 1000.0f;
  const auto gamma = random_vec(cols, 0.5f, 1.5f, 102), beta = random_vec(cols, -1, 1, 103);
  const float* g = affine & 1 ? gamma.data() : nullptr;
  const float* b = affine & 2 ? beta.data() : nullptr;
  const auto dy = random_vec(rows * cols, -1, 1, 104);
  const auto dx0 = random_vec(rows * cols, -1, 1, 105), dg0 = random_vec(cols, -1, 1, 106),
             db0 = random_vec(cols, -1, 1, 107);
  std::vector<float> y_want(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  ref::layer_norm<float>(rows, cols, x.data(), g, b, 1e-5, y_want.data(), mean.data(), rstd.data());
  auto dx_want = dx0, dg_want = dg0, db_want = db0;
  ref::layer_norm_backward<float>(rows, cols, x.data(), g, mean.data(), rstd.data(), dy.data(),
                                  dx_want.data(), dg_want.data(), db_want.data(), true);
  // Without accumulate dx starts as NaN: it must be written, never read (dgamma, dbeta still add).
  const std::vector<float> dx_nan(dx0.size(), std::numeric_limits<float>::quiet_NaN());
  auto dx_fresh_want = dx_nan, dg_fresh_want = dg0;
  ref::layer_norm_backward<float>(rows, cols, x.data(), g, mean.data(), rstd.data(), dy.data(),
                                  dx_fresh_want.data(), dg_fresh_want.data(), nullptr, false);
  const double sum_err = (4 + 2 * std::sqrt(double(cols))) * kEps;
  std::vector<double> row_lim(static_cast<size_t>(rows)), row_absmax(static_cast<size_t>(rows), 0.0);
  for (int64_t i = 0; i < rows * cols; ++i)
    row_absmax[size_t(i / cols)] = std::max(row_absmax[size_t(i / cols)], std::abs(double(x[size_t(i)])));
  double max_row = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double xh = 0;
    for (int64_t c = 0; c < cols; ++c)
      xh = std::max(xh, std::abs(double(x[size_t(r * cols + c)]) - mean[size_t(r)]) * rstd[size_t(r)]);
    row_lim[size_t(r)] = 4 * sum_err * (row_absmax[size_t(r)] * rstd[size_t(r)] + xh) * 1.5;
    max_row = std::max(max_row, row_lim[size_t(r)]);
  }
  auto elem_limit = [&](const std::vector<float>&) {
    return [&](size_t i) { return row_lim[size_t(int64_t(i) / cols)]; };
  };
  const double col_limit = double(rows) * (max_row + (4 + double(rows) / 4) * kEps * 4);
  for_each_isa(threads, [&](const std::string&) {
    std::vector<float> y(x.size()), m(static_cast<size_t>(rows)), rs(static_cast<size_t>(rows));
    k::layer_norm<float>(rows, cols, x.data(), g, b, 1e-5, y.data(), m.data(), rs.data());
    check_within(y, y_want, elem_limit(y), "y");
    // the mean's error is that of a sum: relative to the row's largest |x|, not to the mean
    check_within(
        m, mean, [&](size_t r) { return sum_err * row_absmax[r]; }, "mean");
    check_close(rs, rstd, Tol{0, 4 * sum_err}, "rstd");
    auto dx = dx0, dg = dg0, db = db0;
    k::layer_norm_backward<float>(rows, cols, x.data(), g, mean.data(), rstd.data(), dy.data(), dx.data(),
                                  dg.data(), db.data(), true);
    check_within(dx, dx_want, elem_limit(dx), "dx");
    auto dx_fresh = dx_nan, dg_fresh = dg0;
    k::layer_norm_backward<float>(rows, cols, x.data(), g, mean.data(), rstd.data(), dy.data(),
                                  dx_fresh.data(), dg_fresh.data(), nullptr, false);
    check_within(dx_fresh, dx_fresh_want, elem_limit(dx_fresh), "dx (written, not accumulated)");
    check_close(dg_fresh, dg_fresh_want, Tol{col_limit, 0}, "dgamma (dx written)");
    check_close(dg, dg_want, Tol{col_limit, 0}, "dgamma");
    check_close(db, db_want, Tol{double(rows + 1) * kEps, 0}, "dbeta");
    // any subset of the outputs may be skipped
    auto dx2 = dx0, db2 = db0;
    k::layer_norm_backward<float>(rows, cols, x.data(), g, mean.data(), rstd.data(), dy.data(), dx2.data(),
                                  nullptr, db2.data(), true);
    check_within(dx2, dx_want, elem_limit(dx2), "dx (no dgamma)");
    check_close(db2, db_want, Tol{double(rows + 1) * kEps, 0}, "dbeta (no dgamma)");
    auto dg3 = dg0;
    k::layer_norm_backward<float>(rows, cols, x.data(), g, mean.data(), rstd.data(), dy.data(), nullptr,
                                  dg3.data(), nullptr, true);
    check_close(dg3, dg_want, Tol{col_limit, 0}, "dgamma (no dx)");
  });
}

TEST_CASE("layer_norm on outputs large enough for streaming stores", "[kernels][norm]") {
  // Like softmax, layer_norm streams y once it is at least half the L3 and rows are batch-aligned.
  // Tolerance: the per-row limit of the test above, here with mean ~ 0 and |xhat| <= ~2:
  // 4 (4 + 2 sqrt(cols)) eps (|mean| rstd + 2) * max|gamma| ~ 2e-4 at most; checked at 1e-4 abs.
  const int threads = GENERATE(1, 2);
  const int64_t cols = 1024;
  const int64_t rows = k::cache_info().l3 / 2 / (cols * 4) + 3;
  CAPTURE(rows, cols, threads);
  auto x = random_vec(rows * cols, -3, 3, 141);
  const auto gamma = random_vec(cols, 0.5f, 1.5f, 142), beta = random_vec(cols, -1, 1, 143);
  std::vector<float> want(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
  ref::layer_norm<float>(rows, cols, x.data(), gamma.data(), beta.data(), 1e-5, want.data(), mean.data(),
                         rstd.data());
  std::vector<float> buf(x.size() + 16), m(mean.size()), rs(rstd.size());
  float* y = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) % 64) / 4) % 16;  // 64-byte aligned
  for_each_isa(threads, [&](const std::string&) {
    std::fill(y, y + x.size(), 99.0f);
    k::layer_norm<float>(rows, cols, x.data(), gamma.data(), beta.data(), 1e-5, y, m.data(), rs.data());
    check_close(std::vector<float>(y, y + x.size()), want, Tol{1e-4, 0}, "y (streamed)");
    check_close(rs, rstd, Tol{0, 4 * (4 + 2 * std::sqrt(double(cols))) * kEps}, "rstd");
  });
}

// ---------------------------------------------------------------------------------------------
// Indexing and optimizer

TEST_CASE("embedding gather and scatter-add match the reference exactly", "[kernels][indexing]") {
  // The scatter-add adds repeated ids in index order, as the reference: bitwise equal. Without
  // accumulate it starts from NaN: every row must be written, the rows no id names with zeros.
  const int threads = GENERATE(1, 2);
  const int64_t dim = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  const int64_t n = GENERATE(1, 5, 300, 3000);
  const bool accumulate = GENERATE(true, false);
  CAPTURE(n, dim, threads, accumulate);
  const int64_t vocab = 17;
  const auto table = random_vec(vocab * dim, -1, 1, 111);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::mt19937 gen(112);
  for (auto& i : ids) i = int32_t(gen() % 7 + (gen() % 4 == 0 ? 9 : 0));  // rows 0-6 and 9-15: many repeats
  const auto dy = random_vec(n * dim, -1, 1, 113);
  const auto dt_start = accumulate ? table : std::vector<float>(table.size(), std::nanf(""));
  std::vector<float> y_want(static_cast<size_t>(n * dim));
  auto dt_want = dt_start;
  ref::embedding<float>(n, dim, table.data(), ids.data(), y_want.data());
  ref::embedding_backward<float>(n, dim, vocab, ids.data(), dy.data(), dt_want.data(), accumulate);
  for_each_isa(threads, [&](const std::string&) {
    std::vector<float> y(y_want.size());
    auto dt = dt_start;
    k::embedding<float>(n, dim, table.data(), ids.data(), y.data());
    k::embedding_backward<float>(n, dim, vocab, ids.data(), dy.data(), dt.data(), accumulate);
    check_equal(y, y_want, "embedding");
    check_equal(dt, dt_want, "embedding_backward");
  });
}

TEST_CASE("adam_update matches the reference", "[kernels][optim]") {
  // Same operations in the same order as the reference, but g++ contracts a * b + c into one fma
  // under -mfma, which changes one rounding per operation. Where terms cancel (g = grad + wd * p,
  // or p shrinking toward 0) the relative error is unbounded, so limits are absolute in the scale
  // of each array's terms (|p| <= 1, |g| <= 1.01, v <= 3 (1 - beta2) g^2): 16 eps of that scale.
  // One call updates a list of tensors: every awkward size, then one past a thread team's
  // threshold, each with weight decay or without, laid end to end in one buffer per array.
  const int threads = GENERATE(1, 2);
  const bool decoupled = GENERATE(false, true);
  CAPTURE(decoupled, threads);
  std::vector<int64_t> sizes(kSizes.begin(), kSizes.end());
  sizes.push_back(50001);
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  const auto p0 = random_vec(total, -1, 1, 121), g = random_vec(total, -1, 1, 122);
  auto list = [&](std::vector<float>& p, std::vector<float>& m, std::vector<float>& v) {
    std::vector<k::AdamTensor<float>> out;
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      out.push_back({sizes[i], p.data() + off, g.data() + off, m.data() + off, v.data() + off, i % 2 == 0});
      off += sizes[i];
    }
    return out;
  };
  for_each_isa(threads, [&](const std::string&) {
    auto pw = p0, p = p0;
    std::vector<float> mw(size_t(total), 0.0f), vw(size_t(total), 0.0f), m(size_t(total), 0.0f),
        v(size_t(total), 0.0f);
    const auto want = list(pw, mw, vw), got = list(p, m, v);
    for (int64_t step = 1; step <= 3; ++step) {
      const k::AdamParams ap{1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled, step};
      ref::adam_update<float>(int64_t(want.size()), want.data(), ap);
      k::adam_update<float>(int64_t(got.size()), got.data(), ap);
    }
    check_close(p, pw, Tol{16 * kEps, 0}, "param");
    check_close(m, mw, Tol{16 * kEps * 1.01, 0}, "m");
    check_close(v, vw, Tol{16 * kEps * 3e-3 * 1.03, 0}, "v");
  });
}

TEST_CASE("additive_score forward and backward match the reference", "[kernels][attention]") {
  // tanh from xsimd is within 4 eps of the true value (relative), so each term v t or ds v (1 - t^2)
  // is within ~10 eps of its reference in the scale of |v| (|ds v|); sums are reordered. Limits per
  // element, from the magnitudes of the terms (worst-case bounds, not random-walk ones):
  //   scores[b,s]: (A + 10) eps sum_a |v_a|
  //   dkeys: one term added: 12 eps (|dk0| + |ds v|)
  //   dquery[b,a]: (S + 12) eps (|dq0| + sum_s |ds v_a|);  dv[a]: (B S + 12) eps (|dv0| + sum |ds|)
  const int threads = GENERATE(1, 2);
  const int64_t A = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  const int64_t nb = GENERATE(1, 3, 17), ns = GENERATE(1, 7, 33);
  CAPTURE(nb, ns, A, threads);
  const auto keys = random_vec(nb * ns * A, -2, 2, 151), query = random_vec(nb * A, -2, 2, 152),
             v = random_vec(A, -1, 1, 153), ds = random_vec(nb * ns, -1, 1, 154);
  const auto dk0 = random_vec(nb * ns * A, -1, 1, 155), dq0 = random_vec(nb * A, -1, 1, 156),
             dv0 = random_vec(A, -1, 1, 157);
  std::vector<float> s_want(size_t(nb * ns));
  ref::additive_score<float>(nb, ns, A, keys.data(), query.data(), v.data(), s_want.data());
  auto dk_want = dk0, dq_want = dq0, dv_want = dv0;
  ref::additive_score_backward<float>(nb, ns, A, keys.data(), query.data(), v.data(), ds.data(),
                                      dk_want.data(), dq_want.data(), dv_want.data());
  double v_abs = 0, ds_abs = 0;
  for (float x : v) v_abs += std::abs(x);
  for (float x : ds) ds_abs += std::abs(x);
  std::vector<double> ds_row(size_t(nb), 0.0);  // sum_s |ds[b, s]|
  for (int64_t i = 0; i < nb * ns; ++i) ds_row[size_t(i / ns)] += std::abs(double(ds[size_t(i)]));
  auto s_lim = [&](size_t) { return (double(A) + 10) * kEps * v_abs; };
  auto dk_lim = [&](size_t i) {
    const int64_t row = int64_t(i) / std::max<int64_t>(A, 1), a = int64_t(i) % std::max<int64_t>(A, 1);
    return 12 * kEps * (std::abs(double(dk0[i])) + std::abs(double(ds[size_t(row)]) * v[size_t(a)]));
  };
  auto dq_lim = [&](size_t i) {
    const int64_t b = int64_t(i) / std::max<int64_t>(A, 1), a = int64_t(i) % std::max<int64_t>(A, 1);
    return (double(ns) + 12) * kEps * (std::abs(double(dq0[i])) + ds_row[size_t(b)] * std::abs(v[size_t(a)]));
  };
  auto dv_lim = [&](size_t i) { return (double(nb * ns) + 12) * kEps * (std::abs(double(dv0[i])) + ds_abs); };
  std::vector<float> dv_one_thread;
  for_each_isa(threads, [&](const std::string&) {
    std::vector<float> s(size_t(nb * ns), -1.0f);
    k::additive_score<float>(nb, ns, A, keys.data(), query.data(), v.data(), s.data());
    check_within(s, s_want, s_lim, "scores");
    auto dk = dk0, dq = dq0, dv = dv0;
    k::additive_score_backward<float>(nb, ns, A, keys.data(), query.data(), v.data(), ds.data(), dk.data(),
                                      dq.data(), dv.data());
    check_within(dk, dk_want, dk_lim, "dkeys");
    check_within(dq, dq_want, dq_lim, "dquery");
    check_within(dv, dv_want, dv_lim, "dv");
    // any subset of the outputs may be skipped, and skipping one does not change the others
    auto dk2 = dk0, dv2 = dv0;
    k::additive_score_backward<float>(nb, ns, A, keys.data(), query.data(), v.data(), ds.data(), dk2.data(),
                                      nullptr, dv2.data());
    check_equal(dk2, dk, "dkeys (no dquery)");
    check_equal(dv2, dv, "dv (no dquery)");
    auto dq3 = dq0;
    k::additive_score_backward<float>(nb, ns, A, keys.data(), query.data(), v.data(), ds.data(), nullptr,
                                      dq3.data(), nullptr);
    check_equal(dq3, dq, "dquery alone");
    // dv is summed in b order whatever the team: the same bits on 1 and 2 threads
    std::vector<float> dv_1t = dv0;
    {
      Config one(k::active_isa(), 1);
      k::additive_score_backward<float>(nb, ns, A, keys.data(), query.data(), v.data(), ds.data(), nullptr,
                                        nullptr, dv_1t.data());
    }
    check_equal(dv, dv_1t, "dv, 1 thread vs this run");
  });
}

namespace {
// The GRU cell as the op computed it before it had its own kernel: sums and products rounded one
// at a time (this file is compiled without FMA) and kernels::unary for sigmoid and tanh on the
// active ISA. The kernel must reproduce it bit for bit.
void gru_composition(int64_t B, int64_t H, const float* xp, int64_t xs, const float* hp, int64_t hs,
                     const float* h, float* rz, float* n, float* y) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < 2 * H; ++i) rz[b * 2 * H + i] = xp[b * xs + i] + hp[b * hs + i];
  k::unary<float>(k::Unary::sigmoid, B * 2 * H, rz, rz);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H; ++i)
      n[b * H + i] = xp[b * xs + 2 * H + i] + rz[b * 2 * H + i] * hp[b * hs + 2 * H + i];
  k::unary<float>(k::Unary::tanh, B * H, n, n);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < H; ++i) {
      const float z = rz[b * 2 * H + H + i], nv = n[b * H + i];
      y[b * H + i] = nv + z * (h[b * H + i] - nv);
    }
}
}  // namespace

TEST_CASE("gru_cell forward and backward match the reference", "[kernels][gru]") {
  // Forward against the reference, absolute limits from the unary tolerances (sigmoid within
  // 7 eps, tanh within 10 eps on values <= 1) with |xp|, |hp| <= 2 and |h| <= 1:
  //   rz: 7 eps;  n = tanh(x + r p): 2 * 7 eps through r, 3 eps rounding, 10 eps tanh -> 32 eps;
  //   y = n + z (h - n): 27 eps through n, 2 * 7 eps through z, rounding -> 48 eps.
  // Forward against the unfused composition it replaced, and backward (no transcendental functions)
  // against the reference from the same saved gates: exact, on every ISA and thread count.
  const int threads = GENERATE(1, 2);
  const int64_t H = GENERATE(from_range(kSizes.begin(), kSizes.end()));
  const int64_t B = GENERATE(1, 3, 17);
  const int64_t pad = GENERATE(0, 5);  // xp's rows wider than 3H (a narrowed time step); hp's not
  CAPTURE(B, H, pad, threads);
  const int64_t xs = 3 * H + pad, hs = 3 * H;
  const auto xp = random_vec(B * xs, -2, 2, 171), hp = random_vec(B * hs, -2, 2, 172),
             h = random_vec(B * H, -1, 1, 173);
  const auto dy = random_vec(B * H, -1, 1, 174);
  const auto dxp0 = random_vec(B * 3 * H, -1, 1, 175), dhp0 = random_vec(B * 3 * H, -1, 1, 176),
             dh0 = random_vec(B * H, -1, 1, 177);
  const size_t nrz = size_t(B * 2 * H), nh = size_t(B * H);
  std::vector<float> rz_want(nrz), n_want(nh), y_want(nh);
  ref::gru_cell<float>(B, H, xp.data(), xs, hp.data(), hs, h.data(), rz_want.data(), n_want.data(),
                       y_want.data());
  // Backward from the reference's gates, once adding to earlier gradients and once overwriting.
  auto dxp_want = dxp0, dhp_want = dhp0, dh_want = dh0;
  ref::gru_cell_backward<float>(B, H, rz_want.data(), n_want.data(), hp.data(), hs, h.data(), dy.data(),
                                {dxp_want.data(), false}, {dhp_want.data(), false}, {dh_want.data(), false});
  std::vector<float> dxp_fresh_want(dxp0.size(), 7.0f), dh_fresh_want(dh0.size(), 7.0f);
  ref::gru_cell_backward<float>(B, H, rz_want.data(), n_want.data(), hp.data(), hs, h.data(), dy.data(),
                                {dxp_fresh_want.data(), true}, {}, {dh_fresh_want.data(), true});
  for_each_isa(threads, [&](const std::string&) {
    std::vector<float> rz(nrz, -1.0f), n(nh, -1.0f), y(nh, -1.0f);
    k::gru_cell<float>(B, H, xp.data(), xs, hp.data(), hs, h.data(), rz.data(), n.data(), y.data());
    check_close(rz, rz_want, Tol{7 * kEps, 0}, "rz");
    check_close(n, n_want, Tol{32 * kEps, 0}, "n");
    check_close(y, y_want, Tol{48 * kEps, 0}, "y");
    std::vector<float> rz_c(nrz), n_c(nh), y_c(nh);
    gru_composition(B, H, xp.data(), xs, hp.data(), hs, h.data(), rz_c.data(), n_c.data(), y_c.data());
    check_equal(rz, rz_c, "rz vs the composition");
    check_equal(n, n_c, "n vs the composition");
    check_equal(y, y_c, "y vs the composition");

    auto dxp = dxp0, dhp = dhp0, dh = dh0;
    k::gru_cell_backward<float>(B, H, rz_want.data(), n_want.data(), hp.data(), hs, h.data(), dy.data(),
                                {dxp.data(), false}, {dhp.data(), false}, {dh.data(), false});
    check_equal(dxp, dxp_want, "dxp (added)");
    check_equal(dhp, dhp_want, "dhp (added)");
    check_equal(dh, dh_want, "dh (added)");
    // overwriting ignores what the buffer held; a null output is skipped
    std::vector<float> dxp_fresh(dxp0.size(), -3.0f), dh_fresh(dh0.size(), -3.0f);
    k::gru_cell_backward<float>(B, H, rz_want.data(), n_want.data(), hp.data(), hs, h.data(), dy.data(),
                                {dxp_fresh.data(), true}, {}, {dh_fresh.data(), true});
    check_equal(dxp_fresh, dxp_fresh_want, "dxp (overwritten)");
    check_equal(dh_fresh, dh_fresh_want, "dh (overwritten)");
  });
}

// ---------------------------------------------------------------------------------------------
// Thread-count independence of everything that reduces across rows or blocks.

TEST_CASE("reductions give bitwise the same result with 1 and 2 threads", "[kernels][determinism]") {
  const int64_t rows = GENERATE(257, 1000), cols = GENERATE(33, 257);
  CAPTURE(rows, cols);
  const auto x = random_vec(rows * cols, -3, 3, 131), dy = random_vec(rows * cols, -1, 1, 132);
  const auto gamma = random_vec(cols, 0.5f, 1.5f, 133);
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[size_t(r)] = int32_t((r * 7) % cols);
  for (k::Isa isa : k::available_isas()) {
    CAPTURE(k::isa_name(isa));
    std::vector<float> outs[2][8];
    for (int threads = 1; threads <= 2; ++threads) {
      Config cfg(isa, threads);
      auto& o = outs[threads - 1];
      std::vector<float> y(x.size()), mean(static_cast<size_t>(rows)), rstd(static_cast<size_t>(rows));
      k::layer_norm<float>(rows, cols, x.data(), gamma.data(), nullptr, 1e-5, y.data(), mean.data(),
                           rstd.data());
      std::vector<float> dx(x.size(), 0.0f), dg(size_t(cols), 0.0f), db(size_t(cols), 0.0f);
      k::layer_norm_backward<float>(rows, cols, x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(),
                                    dx.data(), dg.data(), db.data(), true);
      o[0] = dx, o[1] = dg, o[2] = db;
      std::vector<float> bias(size_t(cols), 0.0f);
      const int64_t shape[2] = {rows, cols}, os[2] = {0, 1};
      k::sum_to<float>(2, shape, x.data(), os, bias.data());
      o[3] = bias;
      std::vector<float> total(1, 0.0f);
      const int64_t all[2] = {0, 0};
      k::sum_to<float>(2, shape, x.data(), all, total.data());
      o[4] = total;
      std::vector<float> sa(static_cast<size_t>(cols));
      k::sum_axis<float>(1, rows, cols, x.data(), sa.data());
      o[5] = sa;
      std::vector<float> loss(static_cast<size_t>(rows)), grad(x.size());
      k::cross_entropy<float>(rows, cols, x.data(), t.data(), -1, 0.1, loss.data(), grad.data(),
                              1.0 / double(rows));
      o[6] = loss;
      o[7] = {k::sum_squares<float>(rows * cols, x.data())};
    }
    const char* names[8] = {"dx",        "dgamma",   "dbeta",   "bias sum",
                            "total sum", "sum_axis", "ce loss", "sum_squares"};
    for (int i = 0; i < 8; ++i) check_equal(outs[1][i], outs[0][i], names[i]);
  }
}
