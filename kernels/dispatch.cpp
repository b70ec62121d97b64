// The dispatch tables and the routes of kernels/kernels.hpp that are not generated from the list.
//
// A table starts as the scalar reference for every entry (generated from kernels/kernel_list.hpp,
// so no row can be left out) and the chosen ISA's translation unit then overrides the entries it
// vectorises. float calls go through the float table; the double table keeps the reference,
// except GEMM, which the ISA may provide for float64 gradient checks too.
#include <algorithm>
#include <type_traits>

#include "kernels/counter_rng.hpp"
#include "kernels/kernels.hpp"
#include "kernels/nd_index.hpp"
#include "kernels/ref/ref.hpp"
#include "kernels/strided.hpp"
#include "kernels/table.hpp"

namespace tapegrad::kernels {

namespace {

template <class T>
KernelTable<T> reference_table() {
  KernelTable<T> t;
  t.isa = Isa::scalar;
  t.gemm = ref::gemm<T>;
#define TG_KERNEL(R, name, params, args) t.name = ref::name<T>;
#include "kernels/kernel_list.hpp"
#undef TG_KERNEL
  return t;
}

struct Tables {
  KernelTable<float> f32;
  KernelTable<double> f64;
  explicit Tables(Isa isa) : f32(reference_table<float>()), f64(reference_table<double>()) {
    f32.isa = f64.isa = isa;
    switch (isa) {
      case Isa::scalar:
        break;
      case Isa::sse2:
        install_sse2(f32, f64);
        break;
      case Isa::avx2:
        install_avx2(f32, f64);
        break;
      case Isa::avx512:
        install_avx512(f32, f64);
        break;
    }
  }
};

Tables& tables() {
  static Tables t(startup_isa());
  return t;
}

}  // namespace

void build_tables(Isa isa) {
  tables() = Tables(isa);
}

template <>
const KernelTable<float>& active_table<float>() {
  return tables().f32;
}
template <>
const KernelTable<double>& active_table<double>() {
  return tables().f64;
}

// ----------------------------------------------------------------------------------------------
// GEMM family.

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc, GemmEpilogue<T> ep) {
  if (M <= 0 || N <= 0) return;
  active_table<T>().gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
}

namespace {

// The matrices of `layout` (count() > 0): the ISA's batched GEMM, else one gemm each.
template <class T>
void gemm_layout(const BatchLayout& layout, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                 const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (auto f = active_table<T>().gemm_batched)
    return f(layout, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  for (int64_t m = 0; m < layout.count(); ++m)
    gemm<T>(ta, tb, M, N, K, alpha, A + layout.offset(0, m), lda, B + layout.offset(1, m), ldb, beta,
            C + layout.offset(2, m), ldc);
}

}  // namespace

template <class T>
void gemm_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta, T* C, int64_t ldc,
                  int64_t sc) {
  if (batch <= 0) return;
  gemm_layout<T>(BatchLayout{1, batch, {0, 0, 0}, {sa, sb, sc}}, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta,
                 C, ldc);
}

template <class T>
void gemm_nd_batched(int batch_ndim, const int64_t* batch_shape, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                     T alpha, const T* A, int64_t lda, const int64_t* a_strides, const T* B, int64_t ldb,
                     const int64_t* b_strides, T beta, T* C, int64_t ldc, const int64_t* c_strides) {
  if (batch_ndim == 0) return gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  // Batch dims whose strides line up for all three operands merge (e.g. [B,H] -> [B*H]). Without a
  // summed dim, the two longest become one two-level batch (BatchLayout), so that one team splits
  // all their matrices, and any others a loop. Attention's heads split off the feature axis do not
  // merge with the batch ([B,H] with strides T*3C and d): batching the 4 heads and looping over 64
  // sequences ran on one thread, and a team per head (4 per product) ran the small Transformer's
  // attention products slower on two threads than on one. Each matrix is computed the same way
  // wherever it sits, so the choice changes no result; with a summed dim (C stride 0) the dims keep
  // their order, which fixes the order of the sum.
  const int64_t* strides[] = {a_strides, b_strides, c_strides};
  nd::Space s = nd::coalesce(batch_ndim, batch_shape, 3, strides);
  if (s.total == 0) return;
  const int last = s.ndim - 1;
  if (std::any_of(s.stride[2], s.stride[2] + s.ndim, [](int64_t st) { return st == 0; })) {
    const int64_t n = s.shape[last], da = s.stride[0][last], db = s.stride[1][last], dc = s.stride[2][last];
    nd::for_each_outer(s, 3, [&](int64_t, const int64_t* off) {
      const T *a = A + off[0], *b = B + off[1];
      if (dc == 0 && n > 1) {  // summing over this dim: accumulate one by one
        for (int64_t k = 0; k < n; ++k)
          gemm<T>(ta, tb, M, N, K, alpha, a + k * da, lda, b + k * db, ldb, beta, C + off[2], ldc);
      } else {
        gemm_batched<T>(n, ta, tb, M, N, K, alpha, a, lda, da, b, ldb, db, beta, C + off[2], ldc, dc);
      }
    });
    return;
  }
  auto to_position = [&](int from, int to) {
    std::swap(s.shape[from], s.shape[to]);
    for (auto& op : s.stride) std::swap(op[from], op[to]);
  };
  to_position(int(std::max_element(s.shape, s.shape + s.ndim) - s.shape), last);
  BatchLayout layout{1, s.shape[last]};
  for (int k = 0; k < 3; ++k) layout.inner_stride[k] = s.stride[k][last];
  if (s.ndim == 1) return gemm_layout<T>(layout, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  to_position(int(std::max_element(s.shape, s.shape + last) - s.shape), last - 1);
  layout.outer = s.shape[last - 1];
  for (int k = 0; k < 3; ++k) layout.outer_stride[k] = s.stride[k][last - 1];
  nd::Space rest = s;  // the dims before the two: walked one layout at a time
  rest.ndim = s.ndim - 1;
  rest.total = s.total / s.shape[last];
  nd::for_each_outer(rest, 3, [&](int64_t, const int64_t* off) {
    gemm_layout<T>(layout, ta, tb, M, N, K, alpha, A + off[0], lda, B + off[1], ldb, beta, C + off[2], ldc);
  });
}

template <class T>
int64_t packed_b_size(int64_t K, int64_t N) {
  const auto size = active_table<T>().packed_b_size;
  return size && K > 0 && N > 0 ? size(K, N) : 0;
}

template <class T>
PackedB<T> pack_b(bool trans_b, int64_t K, int64_t N, const T* B, int64_t ldb, T* buffer) {
  const KernelTable<T>& t = active_table<T>();
  PackedB<T> p{trans_b, K, N, ldb, B, t.isa, nullptr};
  if (!buffer || packed_b_size<T>(K, N) == 0) return p;
  t.pack_b(trans_b, K, N, B, ldb, buffer);
  p.panels = buffer;
  return p;
}

template <class T>
void gemm_packed_b(bool ta, int64_t M, T alpha, const T* A, int64_t lda, const PackedB<T>& B, T beta, T* C,
                   int64_t ldc, GemmEpilogue<T> ep) {
  if (M <= 0 || B.N <= 0) return;
  const KernelTable<T>& t = active_table<T>();
  if (!B.panels || B.isa != t.isa)
    return gemm<T>(ta, B.trans, M, B.N, B.K, alpha, A, lda, B.source, B.ld, beta, C, ldc, ep);
  t.gemm_packed_b(ta, B.trans, M, B.N, B.K, alpha, A, lda, B.source, B.ld, B.panels, beta, C, ldc, ep);
}

// ----------------------------------------------------------------------------------------------
// Strided copies.

template <class T>
void copy_strided(int ndim, const int64_t* shape, const T* x, const int64_t* xs, T* y) {
  fast::copy_strided<T>(ndim, shape, x, xs, y);
}
template <class T>
void add_strided(int ndim, const int64_t* shape, const T* dy, T* dx, const int64_t* dxs) {
  fast::add_strided<T>(ndim, shape, dy, dx, dxs);
}
template <class T>
void write_strided(int ndim, const int64_t* shape, const T* x, T* y, const int64_t* ys) {
  fast::write_strided<T>(ndim, shape, x, y, ys);
}

// ----------------------------------------------------------------------------------------------
// Random numbers.

double uniform_at(uint64_t seed, uint64_t counter) {
  // One splitmix64 round over a Weyl sequence keyed by the seed (kernels/counter_rng.hpp): cheap per
  // element, and a pure function of (seed, counter), so masks do not depend on thread count or call order.
  using namespace counter_rng;
  uint64_t z = weyl(seed, counter);
  z = (z ^ (z >> 30)) * kMix1;
  z = (z ^ (z >> 27)) * kMix2;
  return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

#define TG_INSTANTIATE(T)                                                                                   \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T,  \
                        T*, int64_t, GemmEpilogue<T>);                                                      \
  template int64_t packed_b_size<T>(int64_t, int64_t);                                                      \
  template PackedB<T> pack_b<T>(bool, int64_t, int64_t, const T*, int64_t, T*);                             \
  template void gemm_packed_b<T>(bool, int64_t, T, const T*, int64_t, const PackedB<T>&, T, T*, int64_t,    \
                                 GemmEpilogue<T>);                                                          \
  template void gemm_batched<T>(int64_t, bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t,       \
                                int64_t, const T*, int64_t, int64_t, T, T*, int64_t, int64_t);              \
  template void gemm_nd_batched<T>(int, const int64_t*, bool, bool, int64_t, int64_t, int64_t, T, const T*, \
                                   int64_t, const int64_t*, const T*, int64_t, const int64_t*, T, T*,       \
                                   int64_t, const int64_t*);                                                \
  template void copy_strided<T>(int, const int64_t*, const T*, const int64_t*, T*);                         \
  template void add_strided<T>(int, const int64_t*, const T*, T*, const int64_t*);                          \
  template void write_strided<T>(int, const int64_t*, const T*, T*, const int64_t*);

TG_INSTANTIATE(float)
TG_INSTANTIATE(double)
#undef TG_INSTANTIATE
template void copy_strided<int32_t>(int, const int64_t*, const int32_t*, const int64_t*, int32_t*);

}  // namespace tapegrad::kernels
