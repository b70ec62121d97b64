// GEMM loop nest and threading: C = alpha * op(A) * op(B) + beta * C for one instruction set.
//
// The nest, outermost first (block sizes from gemm_config.hpp):
//   for each block of mc rows of op(A)
//     for each depth block of kc                             (beta applies on the first only)
//       if A is transposed: the team transposes the A block into a shared row-major copy; barrier
//       each thread, over its own share of N:
//         for each block of nc columns: pack the B block     (private, L2)
//           for each group of MR rows of its share of M      (MR x kc of A stays in L1)
//             for each B micro-panel (NR columns)            (streams from L2)
//               micro-kernel on one MR x NR tile of C
// The micro-kernel broadcasts A from rows (gemm_micro.hpp), so A that is not transposed is read in
// place: no packing, no barrier, and the threads of a team never wait for each other until the end.
// Threads split the tile grid as tm x tn: along N when there are enough column panels (no B
// packing is duplicated), else along M (each thread then packs the same B block privately, which
// is cheap next to the compute and needs no extra barrier). Work is assigned in whole panels so no
// two threads write the same cache line of C except at a panel edge.
// Small problems (under kMinFlopsPerThread per thread) run on the calling thread with no OpenMP
// region. Batched GEMMs of small matrices (attention heads) parallelise over the batch instead.
// Not here: the micro-kernel (gemm_micro.hpp), packing (gemm_pack.hpp), the block sizes.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>

#include "kernels/simd/gemm_config.hpp"
#include "kernels/simd/gemm_micro.hpp"
#include "kernels/simd/gemm_pack.hpp"

#ifdef TG_GEMM_PROFILE
#include <x86intrin.h>
inline thread_local unsigned long long tg_prof[4];
#define TG_PROF_BEGIN const unsigned long long tg_t0 = __rdtsc()
#define TG_PROF_END(i) tg_prof[i] += __rdtsc() - tg_t0
#else
#define TG_PROF_BEGIN
#define TG_PROF_END(i)
#endif

namespace tapegrad::kernels::simd::gemm_detail {

// C = beta * C over an M x N window (K == 0 or alpha == 0): BLAS semantics, A and B unread.
template <class T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0))
      std::fill(c, c + N, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
  }
}

// The even split of n items over parts: [begin, end) of part p.
inline int64_t split_begin(int64_t n, int parts, int p) { return n * p / parts; }

// Tile is a template parameter so that tuning experiments can instantiate other register tiles.
template <class Arch, class T, class Tile = MicroTile<Arch, T>>
struct GemmDriver {
  static constexpr int MR = Tile::MR, NR = Tile::NR, NV = Tile::NV, W = Tile::W;

  template <bool AK>
  static const MicroKernelTable<Arch, T, MR, NV, AK>& kernels() {
    static constexpr MicroKernelTable<Arch, T, MR, NV, AK> table;
    return table;
  }

  // The problem after resolving transposes: element (i, k) of op(A) is a[i*a_rs + k*a_cs], element
  // (k, j) of op(B) is b[k*b_ks + j*b_js].
  struct Problem {
    int64_t M, N, K;
    T alpha, beta;
    const T* a;
    int64_t a_rs, a_cs;
    const T* b;
    int64_t b_ks, b_js;
    T* c;
    int64_t ldc;
    // Transposed A is transposed into a row-major block, unless it is small enough to be read in
    // place column by column (the copy would cost more than it saves: 64^3 tn ran at 0.74x OpenBLAS).
    bool a_in_place() const { return a_cs == 1 || M * K * int64_t(sizeof(T)) <= kMaxUnpackedA; }
    bool pack_a() const { return !a_in_place(); }
    // Row-major B small enough to stay in L2 is read in place: packing it would cost more than the
    // aligned, contiguous panels save (64^3: about a tenth of the run time).
    bool pack_b() const { return b_js != 1 || K * N * int64_t(sizeof(T)) > kMaxUnpackedB; }
  };

  // Block sizes for one problem: kc and mc split K and M into equal blocks (ceil(K / kc) blocks of
  // equal depth rather than kc, kc, ..., remainder).
  struct Blocks {
    int64_t kc, mc;
    Blocks(const Problem& pr) {
      const Blocking& bk = blocking<T, Tile>();
      kc = ceil_div(pr.K, ceil_div(pr.K, bk.kc));
      mc = round_up(ceil_div(pr.M, ceil_div(pr.M, bk.mc)), std::lcm<int64_t>(MR, W));
    }
    // One packed (transposed) A block; two when there are several, for double buffering.
    int64_t a_buf_elems(const Problem& pr) const {
      const int64_t blocks = ceil_div(pr.K, kc) * ceil_div(pr.M, mc);
      return std::min<int64_t>(blocks, 2) * std::min(pr.M, mc) * a_row_stride<T>(kc);
    }
  };

  // Threads along M (tm) and along N (tn), tm * tn = nt, minimising the largest share of tiles.
  static void choose_grid(int64_t m_panels, int64_t n_panels, int nt, int& tm, int& tn) {
    tm = nt, tn = 1;
    int64_t best = -1;
    for (int d = 1; d <= nt; ++d) {
      if (nt % d) continue;
      const int64_t work = ceil_div(m_panels, nt / d) * ceil_div(n_panels, d);
      if (best < 0 || work < best || (work == best && d > tn)) best = work, tn = d, tm = nt / d;
    }
  }

  // The loop nest above, for thread `tid` of `nt`. a_buf (shared by the team) holds two packed A
  // blocks when A is transposed: double buffering, so one barrier per block suffices (block b+1 is
  // packed into the buffer block b-1 used, and every thread left block b-1 before it entered the
  // barrier of block b).
  static void run_thread(const Problem& pr, int tid, int nt, T* a_buf, TeamBarrier* barrier) {
    if (pr.a_cs != 1 && !pr.pack_a())
      run_thread<true>(pr, tid, nt, a_buf, barrier);
    else
      run_thread<false>(pr, tid, nt, a_buf, barrier);
  }

  // AK: A is read in place column by column (small transposed A, see Problem::a_in_place).
  template <bool AK>
  static void run_thread(const Problem& pr, int tid, int nt, T* a_buf, TeamBarrier* barrier) {
    const Blocking& bk = blocking<T, Tile>();
    const Blocks bl(pr);
    const int64_t M = pr.M, N = pr.N, K = pr.K, kc = bl.kc, mc = bl.mc;
    const int64_t ps = a_row_stride<T>(kc), a_block = std::min(M, mc) * ps;

    const int64_t n_panels = ceil_div(N, NR);
    int tm, tn;
    choose_grid(ceil_div(std::min(M, mc), MR), n_panels, nt, tm, tn);
    const int t_m = tid / tn, t_n = tid % tn;
    const int64_t n_lo = std::min(N, split_begin(n_panels, tn, t_n) * NR);
    const int64_t n_hi = std::min(N, split_begin(n_panels, tn, t_n + 1) * NR);
    const int64_t my_n = n_hi - n_lo;
    const int64_t nc = round_up(ceil_div(my_n, std::max<int64_t>(1, ceil_div(my_n, bk.nc))), NR);
    T* b_buf = my_n > 0 ? scratch<T>(1, ceil_div(nc, NR) * panel_stride<T>(kc, NR)) : nullptr;

    const auto& edge = kernels<AK>();
    int64_t block = 0;
    for (int64_t i0 = 0; i0 < M; i0 += mc) {
      const int64_t mb = std::min(mc, M - i0);
      const int64_t mb_panels = ceil_div(mb, MR);
      const int64_t mp_lo = split_begin(mb_panels, tm, t_m), mp_hi = split_begin(mb_panels, tm, t_m + 1);
      for (int64_t k0 = 0; k0 < K; k0 += kc, ++block) {
        const int64_t kb = std::min(kc, K - k0);
        const T beta = k0 == 0 ? pr.beta : T(1);
        const int64_t bs = panel_stride<T>(kb, NR);
        const T* a_blk;
        int64_t lda;
        if (pr.pack_a()) {
          T* a_cur = a_buf + (block % 2) * a_block;
          const int64_t units = ceil_div(mb, W);
          TG_PROF_BEGIN;
          pack_a_transposed<Arch, T>(std::min(mb, split_begin(units, nt, tid) * W),
                                     std::min(mb, split_begin(units, nt, tid + 1) * W), kb,
                                     pr.a + i0 * pr.a_rs + k0 * pr.a_cs, pr.a_cs, a_cur, ps);
          TG_PROF_END(0);
          if (nt > 1) barrier->wait();
          a_blk = a_cur, lda = ps;
        } else if (AK) {
          a_blk = pr.a + i0 + k0 * pr.a_cs, lda = pr.a_cs;
        } else {
          a_blk = pr.a + i0 * pr.a_rs + k0, lda = pr.a_rs;
        }
        for (int64_t j0 = n_lo; j0 < n_hi; j0 += nc) {
          const int64_t nb = std::min(nc, n_hi - j0);
          const int64_t nb_panels = ceil_div(nb, NR);
          const T* b_src = pr.b + k0 * pr.b_ks + j0 * pr.b_js;
          // Panels of B: packed (stride NR) or, when B is read in place, B itself except for a panel
          // cut by the matrix edge, which the kernel would read past.
          const bool in_place = !pr.pack_b();
          const int64_t ldbp = in_place ? pr.b_ks : NR;
          const int64_t last_full = in_place ? nb / NR : 0;
          TG_PROF_BEGIN;
          if (!in_place)
            pack_b<Arch, T, NR>(kb, nb, b_src, pr.b_ks, pr.b_js, b_buf, bs);
          else if (last_full < nb_panels)
            pack_b<Arch, T, NR>(kb, nb - last_full * NR, b_src + last_full * NR, pr.b_ks, 1, b_buf, bs);
          TG_PROF_END(1);
          for (int64_t ip = mp_lo; ip < mp_hi; ++ip) {
            const T* ap = a_blk + ip * MR * (AK ? 1 : lda);
            const int rows = int(std::min<int64_t>(MR, mb - ip * MR));
            T* c_row = pr.c + (i0 + ip * MR) * pr.ldc + j0;
            for (int64_t jp = 0; jp < nb_panels; ++jp) {
              const int cols = int(std::min<int64_t>(NR, nb - jp * NR));
              const bool packed = jp >= last_full;
              const T* bp = packed ? b_buf + (jp - last_full) * bs : b_src + jp * NR;
              const int64_t ldb = packed ? NR : ldbp;
              T* c = c_row + jp * NR;
              if (rows == MR && cols == NR)
                micro_kernel<Arch, T, MR, NV, AK>(kb, ap, lda, bp, ldb, c, pr.ldc, pr.alpha, beta, cols);
              else
                edge.fn[rows - 1][(cols + W - 1) / W - 1](kb, ap, lda, bp, ldb, c, pr.ldc, pr.alpha, beta, cols);
            }
          }
        }
      }
    }
    // Meet here rather than at OpenMP's closing barrier, which spins without yielding (see TeamBarrier).
    if (nt > 1) barrier->wait();
  }

  // One GEMM on up to nt threads.
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc, int nt) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == T(0)) {
      scale_c(M, N, beta, C, ldc);
      return;
    }
    // op(A)(i, k) = A[i*lda + k] or A[k*lda + i]; op(B)(k, j) = B[k*ldb + j] or B[j*ldb + k]. When a
    // dimension is 1 its stride is irrelevant: call it contiguous so nothing gets packed for it.
    Problem pr{M, N, K, alpha, beta, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, C, ldc};
    if (K == 1) pr.a_cs = 1, pr.a_rs = ta ? 1 : lda;
    if (N == 1) pr.b_js = 1;
    const double flops = 2.0 * double(M) * double(N) * double(K);
    nt = int(std::clamp<double>(flops / kMinFlopsPerThread, 1.0, double(nt)));
    // No more threads than tiles; none at all inside someone else's parallel region.
    nt = int(std::min<int64_t>(nt, ceil_div(M, MR) * ceil_div(N, NR)));
    if (omp_in_parallel()) nt = 1;
    T* a_buf = pr.pack_a() ? scratch<T>(0, Blocks(pr).a_buf_elems(pr)) : nullptr;
    if (nt <= 1) {
      run_thread(pr, 0, 1, a_buf, nullptr);
      return;
    }
    TeamBarrier barrier(nt);
#pragma omp parallel num_threads(nt)
    {
      // The runtime may grant fewer threads than asked (OMP_DYNAMIC, thread limits): then thread 0
      // does it all, since the barrier counts on nt arrivals.
      if (omp_get_num_threads() == nt)
        run_thread(pr, omp_get_thread_num(), nt, a_buf, &barrier);
      else if (omp_get_thread_num() == 0)
        run_thread(pr, 0, 1, a_buf, nullptr);
    }
  }

  // Batched: small matrices go one per thread (no barriers, private buffers); large ones, or a
  // batch too short to balance, go one after another with the team inside each.
  static void gemm_batched(int64_t batch, bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha,
                           const T* A, int64_t lda, int64_t sa, const T* B, int64_t ldb, int64_t sb, T beta,
                           T* C, int64_t ldc, int64_t sc, int nt) {
    if (batch <= 0 || M <= 0 || N <= 0) return;
    const double flops = 2.0 * double(M) * double(N) * double(K);
    const bool per_matrix_team = batch == 1 || nt == 1 || omp_in_parallel() ||
                                 (flops >= 16 * kMinFlopsPerThread && batch % nt != 0 && batch < 4 * nt);
    if (per_matrix_team) {
      for (int64_t i = 0; i < batch; ++i)
        gemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc, nt);
      return;
    }
    // Matrices are handed out one at a time from a shared counter, so a thread that the OS delays
    // (the machine is shared) costs its own share only, not everyone's.
    const int team = int(std::min<int64_t>(nt, batch));
    std::atomic<int64_t> next{0};
    TeamBarrier barrier(team);
#pragma omp parallel num_threads(team)
    {
      for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < batch;
           i = next.fetch_add(1, std::memory_order_relaxed))
        gemm(ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc, 1);
      if (omp_get_num_threads() == team) barrier.wait();
    }
  }
};

}  // namespace tapegrad::kernels::simd::gemm_detail
