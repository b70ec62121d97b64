// The fused scaled-dot-product attention kernels (sdpa_forward, sdpa_backward) on every instruction
// set this machine has, at 1 and 2 threads, against the scalar reference run in double on the same
// float inputs: awkward sizes Tq, Tk in {1, 3, 17, 33, 257}, and 32 (whole vectors of queries on
// every ISA: the keys-major forward of short heads), head sizes {1, 8, 32, 64}, strided
// operands (heads interleaved with padding, as views of a projection), with no mask, a key-padding
// mask broadcast over heads and queries (one batch entry masked entirely with -inf), a full
// [Tq, Tk] mask, causal attention (Tq > Tk leaves rows with no key) and dropout on the weights.
// Results with 1 and 2 threads must be bitwise equal.
//
// Tolerance, per output array: |got - want| <= 16 eps sqrt(n) (|want| + S), eps = FLT_EPSILON,
// n = Tq + Tk + dk + dv the length of the sums chained into one value, S = max(1, max |want|) the
// scale of its terms (the inputs are unit normals, so every product is O(1) and S >= 1 even where a
// gradient cancels to 0, as dk does for a single key). Float rounding in another summation order
// grows like eps sqrt(n) of the terms; observed errors are within a quarter of this bound.
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

namespace {

enum class Masking { none, key_padding, full, causal, causal_padding, dropout };
const char* masking_name(Masking m) {
  switch (m) {
    case Masking::none:
      return "none";
    case Masking::key_padding:
      return "key padding [B,1,1,Tk]";
    case Masking::full:
      return "full [Tq,Tk]";
    case Masking::causal:
      return "causal";
    case Masking::causal_padding:
      return "causal + key padding";
    case Masking::dropout:
      return "dropout 0.25";
  }
  return "?";
}

// One problem: operands in float, laid out [B, T, H, d] with `pad` spare floats after each row of
// heads (so strides are not the dense ones), gradients dense [B, H, T, d], o [B, Tq, H, dv].
struct Problem {
  int64_t B = 2, H = 2, Tq, Tk, dk, dv;
  Masking masking;
  k::AttentionLayout l;
  std::vector<float> q, kk, v, mask, dout;

  Problem(int64_t Tq_, int64_t Tk_, int64_t dk_, int64_t dv_, Masking m, uint32_t seed)
      : Tq(Tq_), Tk(Tk_), dk(dk_), dv(dv_), masking(m) {
    const int64_t pad = 3;
    auto strided = [&](int64_t T, int64_t d) {
      return k::AttentionStrides{T * (H * d + pad), d, H * d + pad};
    };
    l.B = B, l.H = H, l.Tq = Tq, l.Tk = Tk, l.dk = dk, l.dv = dv;
    l.q = strided(Tq, dk), l.k = strided(Tk, dk), l.v = strided(Tk, dv);
    l.o = {Tq * H * dv, dv, H * dv};
    l.dq = {H * Tq * dk, Tq * dk, dk}, l.dk_ = {H * Tk * dk, Tk * dk, dk}, l.dv_ = {H * Tk * dv, Tk * dv, dv};
    l.scale = 1.0 / std::sqrt(double(std::max<int64_t>(dk, 1)));
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t n) {
      x.resize(size_t(n));
      for (float& e : x) e = normal(gen);
    };
    fill(q, B * l.q.b), fill(kk, B * l.k.b), fill(v, B * l.v.b), fill(dout, B * l.o.b);
    if (m == Masking::key_padding || m == Masking::causal_padding) {
      mask.assign(size_t(B * Tk), 0.0f);  // [B, 1, 1, Tk]: the last third of b = 1's keys padded
      for (int64_t j = 0; j < Tk; ++j)
        mask[size_t(j)] = -std::numeric_limits<float>::infinity();  // b = 0: all
      for (int64_t j = Tk - Tk / 3; j < Tk; ++j) mask[size_t(Tk + j)] = -1e9f;
      l.mask_strides = {Tk, 0, 0};
    } else if (m == Masking::full) {
      fill(mask, Tq * Tk);
      l.mask_strides = {0, 0, Tk};
    }
    l.mask = mask.empty() ? nullptr : mask.data();
    l.causal = m == Masking::causal || m == Masking::causal_padding;
    if (m == Masking::dropout) l.dropout = 0.25, l.dropout_seed = 17;
  }
};

struct Result {
  std::vector<float> o, lse, dq, dk, dv;
};

// The kernels on the active ISA, in float. Gradients are added to buffers holding 0.5, or written
// (GradOutput::overwrite) into buffers holding NaN, which must then never be read.
Result run_float(const Problem& p, bool overwrite = false) {
  const float init = overwrite ? std::numeric_limits<float>::quiet_NaN() : 0.5f;
  Result r;
  r.o.assign(size_t(p.B * p.l.o.b), 0.0f), r.lse.assign(size_t(p.B * p.H * p.Tq), 0.0f);
  r.dq.assign(size_t(p.B * p.l.dq.b), init), r.dk.assign(size_t(p.B * p.l.dk_.b), init);
  r.dv.assign(size_t(p.B * p.l.dv_.b), init);
  k::sdpa_forward<float>(p.l, p.q.data(), p.kk.data(), p.v.data(), r.o.data(), r.lse.data());
  k::sdpa_backward<float>(p.l, p.q.data(), p.kk.data(), p.v.data(), r.o.data(), r.lse.data(), p.dout.data(),
                          {r.dq.data(), overwrite}, {r.dk.data(), overwrite}, {r.dv.data(), overwrite});
  return r;
}

// The reference in double on the same values, as float; gradients written (offset 0) or, with
// offset 0.5, as added to buffers holding 0.5.
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
  Result as_float(double offset) const {
    auto narrow = [&](const std::vector<double>& x, double add) {
      std::vector<float> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = float(x[i] + add);
      return y;
    };
    return {narrow(o, 0), narrow(lse, 0), narrow(dq, offset), narrow(dk, offset), narrow(dv, offset)};
  }
};

Reference run_reference(const Problem& p) {
  auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const std::vector<double> q = wide(p.q), kk = wide(p.kk), v = wide(p.v), mask = wide(p.mask),
                            dout = wide(p.dout);
  k::AttentionLayout l = p.l;
  l.mask = mask.empty() ? nullptr : mask.data();
  Reference r;
  r.o.assign(size_t(p.B * l.o.b), 0.0), r.lse.assign(size_t(p.B * p.H * p.Tq), 0.0);
  r.dq.assign(size_t(p.B * l.dq.b), 0.0), r.dk.assign(size_t(p.B * l.dk_.b), 0.0);
  r.dv.assign(size_t(p.B * l.dv_.b), 0.0);
  k::ref::sdpa_forward<double>(l, q.data(), kk.data(), v.data(), r.o.data(), r.lse.data());
  k::ref::sdpa_backward<double>(l, q.data(), kk.data(), v.data(), r.o.data(), r.lse.data(), dout.data(),
                                {r.dq.data(), false}, {r.dk.data(), false}, {r.dv.data(), false});
  return r;
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, int64_t n,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  double scale = 1;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, double(std::abs(w)));
  const double bound = 16 * FLT_EPSILON * std::sqrt(double(n));
  int64_t bad = -1;
  for (size_t i = 0; i < got.size() && bad < 0; ++i) {
    const double g = got[i], w = want[i];
    if (g == w) continue;  // also +inf == +inf (lse of a row with no key)
    if (!(std::abs(g - w) <= bound * (std::abs(w) + scale))) bad = int64_t(i);
  }
  INFO(what << ": first bad index " << bad
            << (bad >= 0 ? ": got " + std::to_string(got[size_t(bad)]) + " want " +
                               std::to_string(want[size_t(bad)])
                         : std::string()));
  CHECK(bad < 0);
}

void check_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  INFO(what);
  CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end(),
                   [](float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; }));
}

}  // namespace

TEST_CASE("sdpa_forward and sdpa_backward match the reference on every ISA, bitwise across threads",
          "[kernels][attention]") {
  const std::vector<int64_t> lengths = {1, 3, 17, 32, 33, 257};
  const std::vector<int64_t> heads = {1, 8, 32, 64};
  const std::vector<Masking> maskings = {Masking::none,   Masking::key_padding,    Masking::full,
                                         Masking::causal, Masking::causal_padding, Masking::dropout};
  uint32_t seed = 1;
  for (int64_t Tq : lengths)
    for (int64_t Tk : lengths)
      for (int64_t d : heads)
        for (Masking m : maskings) {
          // Large problems (257 x 257) once per head size and masking rule, not for every pairing.
          if (Tq * Tk > 257 * 33 && !(Tq == Tk && Tq == 257)) continue;
          const int64_t dv = d == 8 ? 17 : d;  // one value width that is not the key width
          const Problem p(Tq, Tk, d, dv, m, seed++);
          CAPTURE(Tq, Tk, d, dv, masking_name(m));
          const Reference reference = run_reference(p);
          const Result want = reference.as_float(0.5), want_written = reference.as_float(0.0);
          const int64_t n = Tq + Tk + d + dv;
          for (k::Isa isa : k::available_isas()) {
            CAPTURE(k::isa_name(isa));
            Result one, two, written;
            {
              Config cfg(isa, 1);
              one = run_float(p);
              written = run_float(p, true);
            }
            {
              Config cfg(isa, 2);
              two = run_float(p);
            }
            check_close(one.o, want.o, n, "o");
            check_close(one.lse, want.lse, n, "lse");
            check_close(one.dq, want.dq, n, "dq");
            check_close(one.dk, want.dk, n, "dk");
            check_close(one.dv, want.dv, n, "dv");
            check_close(written.dq, want_written.dq, n, "dq written");
            check_close(written.dk, want_written.dk, n, "dk written");
            check_close(written.dv, want_written.dv, n, "dv written");
            check_equal(one.o, two.o, "o, 1 vs 2 threads");
            check_equal(one.dq, two.dq, "dq, 1 vs 2 threads");
            check_equal(one.dk, two.dk, "dk, 1 vs 2 threads");
            check_equal(one.dv, two.dv, "dv, 1 vs 2 threads");
          }
        }
}

TEST_CASE("sdpa: a row with no key to attend to is zeros with no gradient, as softmax defines it",
          "[kernels][attention]") {
  // causal, Tq = 5 > Tk = 3: queries are aligned to the last keys, so rows 0 and 1 see no key.
  const Problem p(5, 3, 8, 8, Masking::causal, 99);
  for (k::Isa isa : k::available_isas()) {
    CAPTURE(k::isa_name(isa));
    Config cfg(isa, 1);
    const Result r = run_float(p);
    for (int64_t bh = 0; bh < p.B * p.H; ++bh)
      for (int64_t i = 0; i < 2; ++i) {
        CHECK(r.lse[size_t(bh * p.Tq + i)] == std::numeric_limits<float>::infinity());
        const int64_t b = bh / p.H, h = bh % p.H;
        for (int64_t d = 0; d < p.dk; ++d) {
          CHECK(r.o[size_t(b * p.l.o.b + h * p.l.o.h + i * p.l.o.t + d)] == 0.0f);
          CHECK(r.dq[size_t(b * p.l.dq.b + h * p.l.dq.h + i * p.l.dq.t + d)] == 0.5f);  // untouched
        }
      }
    CHECK(std::isfinite(r.lse[2]));
  }
}
