// GEMM loop nest and threading: C = act(alpha * op(A) * op(B) + beta * C + bias) (the epilogue:
// GemmEpilogue, kernels/types.hpp) for one instruction set.
//
// The nest, outermost first, for each unit of C (a rectangle of whole tiles; block sizes from
// gemm_config.hpp):
//   for each depth block of kc      (beta and the bias apply on the first only, act on the last)
//     for each block of nc columns of the unit: its B block packed      (private, L2)
//       for each chunk of rows of the unit                   (transposed A: transposed now, L2)
//         for each group of MR rows                          (MR x kc of A stays in L1)
//           for each B micro-panel (NR columns)              (streams from L2)
//             micro-kernel on one MR x NR tile of C
// Packing happens on first use where it can (see b_first_use): the first tile to read a panel of
// row-major B, or of transposed A in panels, packs it as it computes.
// The micro-kernel broadcasts A (gemm_micro.hpp), so A that is not transposed is read in place, and
// transposed A is packed a chunk of 48 rows at a time (transposed into rows, or copied into
// column-major panels of MR rows: see a_in_panels) into a buffer that stays in cache until its
// tiles are done (preparing a whole block of rows up front cost ~15% at 2048x1024x256: the copy
// went out to L3 and came back); only panels that serve several blocks of B are packed up front,
// once per depth block (see a_once). Nothing is shared between units: each packs its own B and its
// own A rows, so a team never waits inside a GEMM, only at its end. A team takes units one at a
// time from a shared counter, or a tall product one band of rows per thread, thread t band t (see
// choose_units); one thread does the whole problem as a single unit.
// Small problems run on the calling thread with no OpenMP region: under kMinFlopsPerThread per
// thread, or while a team costs more than half the one-thread time (TeamCost: on a shared machine
// a team can cost milliseconds). Small row-major B and small transposed A are read in place, and so
// is transposed A of a product at most two B panels wide (kMaxInPlaceAPanels).
// Batched GEMMs of small matrices (attention heads) parallelise over the batch instead.
// Not here: the micro-kernel (gemm_micro.hpp), packing (gemm_pack.hpp), the block sizes.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>

#include "kernels/balanced_split.hpp"
#include "kernels/simd/gemm_config.hpp"
#include "kernels/simd/gemm_micro.hpp"
#include "kernels/simd/gemm_pack.hpp"

// Phase timers for tuning: compile with -DTG_GEMM_PROFILE to count, per thread, the TSC ticks spent
// transposing A (tg_prof[0]) and packing B (tg_prof[1]). Off (empty) in every real build.
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

// The epilogue's activation on rows [i0, i1) of C, for the paths that store C before activating
// it (the micro-kernel activates as it stores).
template <class T>
void activate_rows(const GemmEpilogue<T>& ep, int64_t i0, int64_t i1, int64_t N, T* C, int64_t ldc) {
  if (ep.act == GemmAct::none) return;
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = gemm_activate(ep, i, j, C[i * ldc + j]);
}

// C = act(beta * C + bias) over an M x N window (K == 0 or alpha == 0): BLAS semantics, A and B
// unread.
template <class T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc, const GemmEpilogue<T>& ep) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0))
      std::fill(c, c + N, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    if (ep.bias)
      for (int64_t j = 0; j < N; ++j) c[j] += ep.bias[j];
  }
  activate_rows(ep, 0, M, N, C, ldc);
}

// The even split of n items over parts: [begin, end) of part p.
inline int64_t split_begin(int64_t n, int parts, int p) {
  return n * p / parts;
}

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
    // op(B) already packed (see pack_whole_b), or null: then each unit packs its own B panels.
    const T* b_packed = nullptr;
    // What is done to C as it is stored: bias, activation (kernels/types.hpp).
    GemmEpilogue<T> ep = {};
    // The epilogue of the tile at row i, column j of C in the depth block [k0, k0 + kb), its
    // pointers at the tile, filled in te, or null when there is none: the bias on the first block,
    // the activation on the last.
    const GemmEpilogue<T>* tile_epilogue(int64_t i, int64_t j, int64_t k0, int64_t kb,
                                         GemmEpilogue<T>& te) const {
      te.bias = ep.bias && k0 == 0 ? ep.bias + j : nullptr;
      te.act = k0 + kb >= K ? ep.act : GemmAct::none;
      te.gate = te.act == GemmAct::relu_gate ? ep.gate + i * ep.ldg + j : nullptr;
      te.ldg = ep.ldg;
      return te.bias || te.act != GemmAct::none ? &te : nullptr;
    }
    // Transposed A is packed (see a_in_panels), unless it is small enough to be read in place
    // column by column (the copy would cost more than it saves: 64^3 tn ran at 0.74x OpenBLAS), or C
    // is at most kMaxInPlaceAPanels B panels wide on a four-vector tile: a row panel packed on first
    // use would serve one more tile at most, and a second in-place read of the lines the first tile
    // just fetched is cheaper than the packing tile's scalar stores (weight gradients dW = dy^T x of
    // 128 outputs: see kMaxInPlaceAPanels).
    bool a_in_place() const {
      return a_cs == 1 || M * K * int64_t(sizeof(T)) <= max_unpacked_a<Tile>() ||
             (NV >= 4 && N <= kMaxInPlaceAPanels * NR && lines_stay_in_l2(a_cs, depth_block(K)));
    }
    bool pack_a() const { return !a_in_place(); }
    // Row-major B small enough to stay in L2 is read in place: packing it would cost more than the
    // aligned, contiguous panels save (64^3: about a tenth of the run time). Prepacked B counts as
    // packed (its panels are read, never B itself).
    bool pack_b() const { return b_packed || b_js != 1 || K * N * int64_t(sizeof(T)) > kMaxUnpackedB; }
  };

  // Up to this many B panels of C, transposed A of any size is read in place (Problem::a_in_place).
  // bench_gemm-like loop at 1 thread on Zen 5, paired runs (both builds at once, one on each core,
  // then swapped; two rounds), in place against packed on first use: 512x1024x128 tn 1.036x (the
  // halves of 512x2048x128, which is split by depth), 768x512x128 tn 1.036x, 512x1024x128 tt 1.020x,
  // 2048x128x128 tn 1.045x, 384x1024x128 tn 1.007x. Only while A's lines stay in L2 for the second
  // tile (lines_stay_in_l2): 2048x512x128 tn (depth 512, lines 8 KiB apart) lost 0.954x in place. At
  // four panels it lost too: 2048x128x256 tn 0.90x (each line fetched again for each of four tiles).
  static constexpr int64_t kMaxInPlaceAPanels = 2;

  // Depth of the blocks for one problem: ceil(K / kc) blocks of equal depth rather than kc, kc, ...,
  // remainder.
  static int64_t depth_block(int64_t K) { return ceil_div(K, ceil_div(K, blocking<T, Tile>().kc)); }

  // Rows of transposed A packed at a time into a thread's private buffer: whole register tiles,
  // few enough (48 x 512 floats, ~100 KiB) to sit in L2 next to the B block until the tiles that
  // use them are done.
  static constexpr int64_t kChunkRows = std::lcm(MR, W) * (W >= 16 ? 1 : 2);

  // How a team cuts C: into um x un rectangles of whole panels (units), about two per thread,
  // handed out one at a time from a shared counter. A thread that the OS keeps off a core then
  // delays the GEMM by at most the unit it holds, where a static split would wait for its whole
  // share (under load a static split made 1024^3 slower on 2 threads than on 1). Each unit prepares
  // its own operands for all depths: cutting N (un units across) prepares A un times, cutting M (um
  // units down) prepares B um times. When both operands fit in L2 together, the cut minimises that
  // preparation: an operand that is packed or transposed costs its K x dim elements per
  // preparation, one read in place about an eighth of that (it is only read, from cache). Ties cut
  // N. Larger operands keep the rule that held at 1024^3 and the 2048 shapes: cut N unless A needs
  // transposing and is the larger operand. Either way only into units that leave no thread much
  // more than its share of the tiles (see busiest_share). (At 128^3 tn, cutting M into four
  // re-packed B four times: 96 GFLOP/s on two threads; cutting N runs the in-place A twice: 126.) A
  // long-K product (K at least kLongDepth times M and N, a weight gradient dW = dy^T x over all of
  // a batch's rows) takes one unit per thread instead: there each unit's own preparation of the
  // operand it shares (K x 128 floats of B for 512x2048x128 tn, 1 MiB from L3) is a sixth of the
  // unit's time, and a second unit per thread repeats it (four alternating rounds on a 2-core Zen
  // 5, GFLOP/s at 2 threads, two units a thread -> one: 512x2048x128 tn 336-367 -> 365-393, tt
  // 321-356 -> 357-391).
  static constexpr int64_t kLongDepth = 4;
  // A tall product (M at least kTallRows times N, enough row panels for every thread, op(B) under
  // L2) is cut into one band of rows per thread instead, thread t taking band t: the row split of
  // the elementwise kernels (parallel_ranges), so a linear's output rows, and its input's, stay in
  // the cache of the core that the ops before and after give them to. Each band prepares all of
  // B, which is why B must be small. Median GFLOP/s at 2 threads on a 2-core Zen 5, bands against
  // units from the counter (two alternating runs each): 4000x192x768 nn 355-361 against 266-279,
  // 2048x128x512 nn 337-363 against 267-334; 2048x1024x256 (B 1 MiB) kept the counter.
  static constexpr int64_t kTallRows = 4;
  struct Units {
    int64_t um, un;
    bool fixed = false;  // unit t is thread t's (else units go to whoever asks next)
    int64_t count() const { return um * un; }
    // Unit k's row panels [m_lo, m_hi) and column panels [n_lo, n_hi): even splits of each.
    struct Panels {
      int64_t m_lo, m_hi, n_lo, n_hi;
      int64_t tiles() const { return (m_hi - m_lo) * (n_hi - n_lo); }
    };
    Panels panels(int64_t k, int64_t m_panels, int64_t n_panels) const {
      const int64_t iu = k / un, ju = k % un;
      return {split_begin(m_panels, int(um), int(iu)), split_begin(m_panels, int(um), int(iu + 1)),
              split_begin(n_panels, int(un), int(ju)), split_begin(n_panels, int(un), int(ju + 1))};
    }
  };
  static Units choose_units(const Problem& pr, int nt) {
    if (nt <= 1) return {1, 1};
    if (pr.M >= kTallRows * pr.N && ceil_div(pr.M, MR) >= 8 * nt &&
        pr.K * pr.N * int64_t(sizeof(T)) < cache_info().l2)
      return {nt, 1, true};
    const bool long_depth = pr.K >= kLongDepth * std::max(pr.M, pr.N);
    const int64_t m_panels = ceil_div(pr.M, MR), n_panels = ceil_div(pr.N, NR);
    const int64_t target = (long_depth ? 1 : 2) * nt;
    auto cut_n = [&](int64_t um) { return Units{um, std::min(n_panels, ceil_div(target, um))}; };
    auto balanced = [&](const Units& u) { return busiest_share(m_panels, n_panels, u, nt) <= kMaxImbalance; };
    const int64_t bytes = (pr.M + pr.N) * pr.K * int64_t(sizeof(T));
    if (bytes > cache_info().l2) {
      if (pr.pack_a() && pr.M >= pr.N) return cut_n(std::min(m_panels, target));
      // Across N in as many parts as balance, else bands of rows (MR-row panels always balance).
      for (int64_t un = std::min(n_panels, target); un > 1; --un)
        if (const Units u{std::min(m_panels, ceil_div(target, un)), un}; balanced(u)) return u;
      return {std::min(m_panels, target), 1};
    }
    auto prep = [](bool packed, int64_t dim) { return double(dim) * (packed ? 1.0 : 0.125); };
    const double a_cost = prep(pr.pack_a(), pr.M), b_cost = prep(pr.pack_b(), pr.N);
    const int64_t least = std::min<int64_t>(nt, m_panels * n_panels);  // every thread gets a unit
    // The cheapest balanced cut; if none balances, the most even one. Candidates: N cut into about
    // target / um parts for each um, and, when A is packed, a band of rows per thread (A packed
    // once, B once per band, where 2 x 2 units pack each twice). Bands against the cuts before, 2
    // threads, three alternating rounds of bench_gemm on Zen 5: 256^3 tn 1.15x, tt 1.17x; 768x128x384
    // (the GPT recipe's QKV weight shape) tn 1.13x, tt 1.10x; 768x128x512 1.03-1.05x; 257^3 0.98x.
    Units best{1, 1};
    double best_cost = -1, best_share = -1;
    auto consider = [&](const Units& u) {
      if (u.count() < least) return;
      const double cost = double(u.um) * b_cost + double(u.un) * a_cost;
      const double share = std::max(busiest_share(m_panels, n_panels, u, nt), kMaxImbalance);
      if (best_cost < 0 || share < best_share || (share == best_share && cost < best_cost))
        best = u, best_cost = cost, best_share = share;
    };
    for (int64_t um = 1; um <= std::min(m_panels, target); ++um) consider(cut_n(um));
    if (pr.pack_a()) consider(Units{std::min<int64_t>(m_panels, nt), 1});
    return best;
  }

  // How much more than an even share of the tiles the busiest thread computes when the team takes
  // the units in counter order, each going to whichever thread is free first (with times in
  // proportion to tiles), as a ratio (1: even). A cut is balanced up to kMaxImbalance. With NR = 64
  // on AVX-512 a few hundred columns are a few panels, and cutting them unevenly cost a quarter of
  // the time: 384^3 nn at 2 threads was cut into units of 1, 2, 1 and 2 column panels, which leave
  // one thread 4 panels to the other's 2. Balanced cuts, GFLOP/s at 2 threads on Zen 5, before ->
  // after (alternating runs): 384^3 nn 300 -> 351, nt 295 -> 366; 320^3 nn 315 -> 354; the GPT
  // recipe's QKV projection 768x128x384 nn 284-297 -> 362-372 (bench_gemm, two rounds), nt 291-295
  // -> 354-383; shapes whose cuts were already even unchanged.
  static constexpr double kMaxImbalance = 1.05;
  static double busiest_share(int64_t m_panels, int64_t n_panels, const Units& u, int nt) {
    constexpr int kMaxThreads = 64;  // beyond that many threads a cut is taken as even
    if (u.fixed || nt > kMaxThreads) return 1.0;  // bands: one even unit per thread
    int64_t load[kMaxThreads];
    std::fill(load, load + nt, int64_t(0));
    for (int64_t k = 0; k < u.count(); ++k)
      *std::min_element(load, load + nt) += u.panels(k, m_panels, n_panels).tiles();
    return double(*std::max_element(load, load + nt)) * nt / double(m_panels * n_panels);
  }

  // The loop nest above, for thread `tid` of `nt`: units from `next` until none are left.
  // run: the team's account (see TeamRun), or null outside a team.
  static void run_thread(const Problem& pr, int tid, int nt, const Units& units, std::atomic<int64_t>* next,
                         TeamBarrier* barrier, TeamRun* run = nullptr) {
    const auto t0 = run ? TeamRun::Clock::now() : TeamRun::Clock::time_point();
    const int64_t m_panels = ceil_div(pr.M, MR), n_panels = ceil_div(pr.N, NR);
    int64_t tiles = 0;
    auto take = [&] { return next ? next->fetch_add(1, std::memory_order_relaxed) : 0; };
    for (int64_t u = units.fixed ? tid : take(); u < units.count();
         u = units.fixed || !next ? units.count() : take()) {
      const auto [mp_lo, mp_hi, np_lo, np_hi] = units.panels(u, m_panels, n_panels);
      const int64_t n_lo = std::min(pr.N, np_lo * NR), n_hi = std::min(pr.N, np_hi * NR);
      const bool ak = pr.a_cs != 1 && (!pr.pack_a() || a_in_panels(pr));
      tiles += ak ? run_unit<true>(pr, mp_lo, mp_hi, n_lo, n_hi) : run_unit<false>(pr, mp_lo, mp_hi, n_lo, n_hi);
    }
    if (run) run->report(tid, double(tiles), t0, TeamRun::Clock::now());
    // Meet here rather than at OpenMP's closing barrier, which spins without yielding (see TeamBarrier).
    if (nt > 1) barrier->wait();
  }

  // Columns of B packed at a time by a unit `my_n` wide: blocks of about nc that stay in L2, except
  // for transposed A transposed into rows, which is packed once per depth block against all of them.
  static int64_t block_columns(const Problem& pr, int64_t my_n) {
    return pr.pack_a() && !a_in_panels(pr)
               ? round_up(my_n, NR)
               : round_up(ceil_div(my_n, std::max<int64_t>(1, ceil_div(my_n, blocking<T, Tile>().nc))), NR);
  }

  // How transposed A is packed, and so which operand stays in cache while the other streams. A B
  // panel (kc x NR) that fits in L1 serves the chunk's rows of A back to back from there (AVX2's
  // 16-wide panels): A is transposed into rows (pack_a_transposed), read from L2, once per depth
  // block, against all of the unit's B. A wider panel (AVX-512's 64) comes from L2 for every tile
  // anyway, so A goes into column-major panels (pack_a_panels, a copy rather than a transpose) and
  // each stays in L1 while an L2-sized block of B streams past, as unpacked A does. A from L2 as
  // well cost 512x2048x128 tn 5-10% on AVX-512, panels with B panels outer cost AVX2 3-7%, and all
  // of a wide unit's B in one block (2 MiB at 1024^3, past L2) cost 1024^3 tn 10% against blocks.
  static bool a_in_panels(const Problem& pr) {
    return depth_block(pr.K) * NR * int64_t(sizeof(T)) > cache_info().l1d;
  }

  // Rows of A read in place whose depth block is at most this long (the model's K = 128 products)
  // are prefetched: a row of a few cache lines is too short a stream for the hardware prefetcher,
  // so each tile that opened a group of MR rows from memory waited for them line by line. Asking for
  // the next group's lines before a group's last tile (eight alternating rounds, operands not in
  // cache, Zen 5): 2048x384x128 nt +15%, 2048x512x128 nt with bias and ReLU +9-14%, 2048x128x128 nt
  // +23%, unchanged (0.99-1.01x) with operands in cache. At K = 256 it gained 3% cold and lost
  // 2% warm, at 512 it lost 3% warm: longer rows stream well enough.
  // (prefetch_rows, gemm_pack.hpp: prefetch_span per row read 0.85x here with the operands in memory,
  // ten alternating rounds, 2048x384x128 nt, for the same lines.)
  static constexpr int64_t kShortRowBytes = 512;

  // Packing on first use. A separate packing pass only moves memory while the FMA units idle: B's
  // copy was 12% of a 64x256x768 nn product on Zen 5, transposed A's 7% of 256^3 tn, and twice that
  // share at 2 threads, where each unit packs its own operands for half the work. Instead the first
  // tile to read a panel reads it where it lies (the kernel loads every element anyway) and stores
  // what it loaded into the packed panel, which the unit's later tiles read: B's panels in the
  // unit's first row of tiles, transposed A's in its first column (see a_first_use). Only a B panel
  // cut by the matrix edge inside a vector is still packed beforehand (the kernel would read past
  // the edge). Median GFLOP/s, alternating calls, Zen 5: 64x256x768 nn 197 -> 213 at 1 thread, 325
  // -> 362 at 2; 256^3 tn 234 -> 244 and 344 -> 368; 1024^3 and the 2048 shapes within 3% either way
  // (2048x1024x256 tn at 1 thread 0.98x). b_first_use: row-major B that its unit would pack whole.
  static bool b_first_use(const Problem& pr) { return pr.pack_b() && !pr.b_packed && pr.b_js == 1; }
  // Transposed A packed on first use (its panels, see a_in_panels) is read in place MR elements at a
  // time, so each stored line of A is read again by the next one or two panels, and those reads hit
  // only if the depth block's kb lines, one per stored row, stay in L2 meanwhile. How many sets of
  // L2 they fall into depends on the largest power of two p dividing A's stride in bytes: L2 / p
  // lines' worth, so they stay while kb x p fits in L2 (at a power-of-two stride, while the block's
  // whole span does; 576 or 768 floats apart, p is 256 or 1024 bytes and they always stay). Past it,
  // a chunk packed beforehand (pack_panels, whole lines at a time) is quicker. bench_gemm at 1
  // thread on Zen 5, paired runs (both builds at once, one on each core, then swapped; two rounds),
  // this rule against first use always: 2048x512x128 tn and tt (8 KiB apart) 1.09x, 2048x1024x256
  // 1.06x, 1024^3 1.00x. Where first use stays, packing beforehand would lose (median GFLOP/s,
  // alternating): 256^3 tn 172-175 against 181-185, 384x2048x128 tn 162-165 against 177-179,
  // 512x2048x128 tn (kb x p = 1 MiB) 155-160 against 158-163; and the Spanish-English model's
  // weight gradients 576x4000x192 and 768x4000x192 tn (a span of kb x stride past L2, but p of 256
  // and 1024 bytes) 0.88x and 0.92x when the span decided.
  static bool a_first_use_fits(const Problem& pr, int64_t kb) { return lines_stay_in_l2(pr.a_cs, kb); }
  // Whether kb lines of transposed A, a_cs elements apart, stay in L2 together (see a_first_use_fits).
  static bool lines_stay_in_l2(int64_t a_cs, int64_t kb) {
    const int64_t stride = a_cs * int64_t(sizeof(T));
    return kb * (stride & -stride) <= cache_info().l2;  // stride & -stride: its largest power of two
  }

  // One tile that packs on first use: pack_a (only for column-major A, AK) stores the MR x kb panel
  // of A it reads (a, lda: transposed A in place) at a_out; pack_b stores the kb x NR panel of B it
  // reads (b, ldb: B in place) at b_out.
  template <bool AK>
  static void first_use_tile(bool pack_a, bool pack_b, int64_t kb, const T* a, int64_t lda, const T* b,
                             int64_t ldb, T* c, int64_t ldc, T alpha, T beta, int rows, T* a_out, T* b_out,
                             const GemmEpilogue<T>* ep) {
    if constexpr (AK) {
      if (pack_a && pack_b)
        return micro_kernel<Arch, T, MR, NV, AK, true, true>(kb, a, lda, b, ldb, c, ldc, alpha, beta, rows,
                                                             NR, b_out, a_out, ep);
      if (pack_a)
        return micro_kernel<Arch, T, MR, NV, AK, false, true>(kb, a, lda, b, ldb, c, ldc, alpha, beta, rows,
                                                              NR, nullptr, a_out, ep);
    }
    micro_kernel<Arch, T, MR, NV, AK, true>(kb, a, lda, b, ldb, c, ldc, alpha, beta, rows, NR, b_out, nullptr,
                                            ep);
  }

  // One unit: rows [mp_lo*MR, mp_hi*MR) (panels) and columns [n_lo, n_hi) of C, all depths.
  // AK: A is read column by column: small transposed A in place (see Problem::a_in_place), larger
  // transposed A from its packed panels (a_in_panels).
  // Returns the number of tiles of C computed (per depth block).
  template <bool AK>
  static int64_t run_unit(const Problem& pr, int64_t mp_lo, int64_t mp_hi, int64_t n_lo, int64_t n_hi) {
    const int64_t M = pr.M, K = pr.K, kc = depth_block(K);
    const int64_t my_n = n_hi - n_lo;
    if (mp_lo < mp_hi && my_n > 0) {
      // B comes in blocks of nc columns (block_columns), and for each block all rows of A stream
      // past it: transposed A in panels (see a_once) or, in rows, a chunk at a time once per depth
      // block against all of the unit's B (one block). A "chunk" of A that is not packed, or that
      // was packed up front, is all of the unit's rows.
      const int64_t nc = block_columns(pr, my_n);
      T* b_buf = scratch<T>(1, ceil_div(nc, NR) * panel_stride<T>(kc, NR));
      const bool panels_a = pr.pack_a() && AK;  // else rows (see a_in_panels)
      // Panels for more than one block of B are packed once per depth block, all of the unit's rows
      // (2048x512x2048 tn: 8% of the time packing A again for each block, 2% once); for one block,
      // a chunk at a time, used while it is still in L1/L2 (2048x128x128 tn ran 5-10% faster so).
      const bool a_once = panels_a && nc < round_up(my_n, NR);
      const int64_t a_ps = panels_a ? a_panel_stride<T, MR>(kc) : a_row_stride<T>(kc);
      const int64_t chunk_panels = !pr.pack_a() || a_once ? mp_hi - mp_lo : kChunkRows / MR;
      T* a_buf = pr.pack_a() ? scratch<T>(0, chunk_panels * (panels_a ? a_ps : MR * a_ps)) : nullptr;
      const bool rows_outer = !pr.pack_a() || panels_a;
      // A's panels are packed on first use (see b_first_use) by the tiles of the unit's first B panel
      // of each depth block, if that panel is a whole one and A's lines stay in L2 (a_first_use_fits);
      // else by pack_panels beforehand.
      const bool a_first_use = panels_a && std::min(nc, my_n) >= NR && a_first_use_fits(pr, kc);
      // Rows [r0, r0 + rows) of depth block k0 (kb deep) into panels at dst, kChunkRows at a time.
      auto pack_panels = [&](int64_t r0, int64_t rows, int64_t k0, int64_t kb, T* dst) {
        TG_PROF_BEGIN;
        for (int64_t r = r0; r < r0 + rows; r += kChunkRows) {
          const int64_t last_row_cols = k0 + kb == K ? M - r : std::numeric_limits<int64_t>::max();
          pack_a_panels<T, MR>(std::min(kChunkRows, r0 + rows - r), kb, pr.a + r + k0 * pr.a_cs, pr.a_cs,
                               last_row_cols, dst + (r - r0) / MR * a_ps, a_ps);
        }
        TG_PROF_END(0);
      };

      const auto& edge = kernels<AK>();
      // The matrix's last rows of tiles, when short, in a shorter tile where that is quicker.
      const MicroKernelFn<T>* bottom = bottom_edge_kernels<Arch, T, MR, NV, AK>(int(M % MR));
      for (int64_t k0 = 0; k0 < K; k0 += kc) {
        const int64_t kb = std::min(kc, K - k0);
        const T beta = k0 == 0 ? pr.beta : T(1);
        const int64_t bs = panel_stride<T>(kb, NR);
        if (a_once && !a_first_use)
          pack_panels(mp_lo * MR, std::min(M, mp_hi * MR) - mp_lo * MR, k0, kb, a_buf);
        for (int64_t j0 = n_lo; j0 < n_hi; j0 += nc) {
          const int64_t nb = std::min(nc, n_hi - j0);
          const int64_t nb_panels = ceil_div(nb, NR);
          const T* b_src = pr.b + k0 * pr.b_ks + j0 * pr.b_js;
          // Panels of B: [0, last_full) read in place when B is (all but a panel cut by the matrix
          // edge inside a vector, which the kernel would read past), the rest packed (stride NR): those
          // before first_use by the unit's first row of tiles (see b_first_use), the others here.
          const bool in_place = !pr.pack_b();
          const int64_t ldbp = in_place ? pr.b_ks : NR;
          const int64_t last_full = !in_place ? 0 : nb % W == 0 ? nb_panels : nb / NR;
          const int64_t first_use = b_first_use(pr) ? nb / NR : 0;
          const int64_t packed_from = std::max(last_full, first_use);
          // Prepacked: block k0 / kc of the whole packed B, from this block's first panel.
          const T* panels =
              pr.b_packed ? pr.b_packed + k0 / kc * packed_block(pr.K, pr.N) + j0 / NR * bs : b_buf;
          TG_PROF_BEGIN;
          if (!pr.b_packed && packed_from < nb_panels)
            pack_b<Arch, T, NR>(kb, nb - packed_from * NR, b_src + packed_from * NR * pr.b_js, pr.b_ks,
                                pr.b_js, b_buf + packed_from * bs, bs);
          TG_PROF_END(1);
          for (int64_t cp = mp_lo; cp < mp_hi; cp += chunk_panels) {
            const int64_t cp_end = std::min(mp_hi, cp + chunk_panels);
            const T* a_blk;  // row cp * MR of op(A), depth k0
            int64_t lda, a_step;  // the kernel's lda; elements from one panel of A to the next
            const int64_t r0 = cp * MR, rows = std::min(M, cp_end * MR) - r0;
            if (a_once) {
              a_blk = a_buf + (cp - mp_lo) * a_ps, lda = MR, a_step = a_ps;
            } else if (panels_a) {
              if (!a_first_use) pack_panels(r0, rows, k0, kb, a_buf);
              a_blk = a_buf, lda = MR, a_step = a_ps;
            } else if (pr.pack_a()) {
              TG_PROF_BEGIN;
              pack_a_transposed<Arch, T>(0, rows, kb, pr.a + r0 + k0 * pr.a_cs, pr.a_cs, a_buf, a_ps);
              a_blk = a_buf, lda = a_ps, a_step = MR * a_ps;
              TG_PROF_END(0);
            } else if (AK) {
              a_blk = pr.a + cp * MR + k0 * pr.a_cs, lda = pr.a_cs, a_step = MR;
            } else {
              a_blk = pr.a + cp * MR * pr.a_rs + k0, lda = pr.a_rs, a_step = MR * lda;
            }
            auto tile = [&](int64_t ip, int64_t jp) {
              const T* ap = a_blk + (ip - cp) * a_step;
              const int rows = int(std::min<int64_t>(MR, M - ip * MR));
              const int cols = int(std::min<int64_t>(NR, nb - jp * NR));
              const bool packed = jp >= last_full;
              const T* bp = packed ? panels + jp * bs : b_src + jp * NR;
              const int64_t ldb = packed ? NR : ldbp;
              T* c = pr.c + ip * MR * pr.ldc + j0 + jp * NR;
              GemmEpilogue<T> te;
              const GemmEpilogue<T>* ep = pr.tile_epilogue(ip * MR, j0 + jp * NR, k0, kb, te);
              const bool pack_b_now = ip == mp_lo && jp < first_use;
              const bool pack_a_now = a_first_use && j0 == n_lo && jp == 0;
              if (pack_a_now || pack_b_now)
                first_use_tile<AK>(
                    pack_a_now, pack_b_now, kb, pack_a_now ? pr.a + ip * MR + k0 * pr.a_cs : ap,
                    pack_a_now ? pr.a_cs : lda, pack_b_now ? b_src + jp * NR : bp, pack_b_now ? pr.b_ks : ldb,
                    c, pr.ldc, pr.alpha, beta, rows, const_cast<T*>(ap), b_buf + jp * bs, ep);
              else if (rows < MR && bottom)
                bottom[(cols + W - 1) / W - 1](kb, ap, lda, bp, ldb, c, pr.ldc, pr.alpha, beta, rows, cols,
                                               nullptr, nullptr, ep);
              else if (cols == NR)
                micro_kernel<Arch, T, MR, NV, AK>(kb, ap, lda, bp, ldb, c, pr.ldc, pr.alpha, beta, rows, cols,
                                                  nullptr, nullptr, ep);
              else
                edge.fn[(cols + W - 1) / W - 1](kb, ap, lda, bp, ldb, c, pr.ldc, pr.alpha, beta, rows, cols,
                                                nullptr, nullptr, ep);
            };
            if (rows_outer) {
              // MR rows of A stay in L1 while the B panels stream past. Short rows of A read in place
              // (see kShortRowBytes) are prefetched a tile ahead: the next group's before the last tile.
              const bool prefetch_a = !AK && kb * int64_t(sizeof(T)) <= kShortRowBytes && nb_panels > 1;
              for (int64_t ip = cp; ip < cp_end; ++ip) {
                for (int64_t jp = 0; jp + 1 < nb_panels; ++jp) tile(ip, jp);
                if (prefetch_a && ip + 1 < cp_end) prefetch_rows(MR, kb, a_blk + (ip + 1 - cp) * a_step, lda);
                tile(ip, nb_panels - 1);
              }
            } else {
              // Each B panel is used by the chunk's rows back to back.
              for (int64_t jp = 0; jp < nb_panels; ++jp)
                for (int64_t ip = cp; ip < cp_end; ++ip) tile(ip, jp);
            }
          }
        }
      }
    }
    return std::max<int64_t>(0, mp_hi - mp_lo) * ceil_div(std::max<int64_t>(my_n, 0), NR);
  }

  // op(B) packed whole, for GEMMs that share it (kernels::pack_b): for each depth block of
  // depth_block(K), all ceil(N / NR) panels, as run_unit would pack them; packed_block elements a
  // block (its panels' stride is that of the block's own depth, only the last block may be shallower).
  static int64_t packed_block(int64_t K, int64_t N) { return ceil_div(N, NR) * panel_stride<T>(depth_block(K), NR); }
  static int64_t packed_size(int64_t K, int64_t N) {
    return K <= 0 || N <= 0 ? 0 : ceil_div(K, depth_block(K)) * packed_block(K, N);
  }
  static void pack_whole_b(bool tb, int64_t K, int64_t N, const T* B, int64_t ldb, T* dst) {
    if (K <= 0 || N <= 0) return;
    const int64_t kc = depth_block(K), b_ks = tb ? 1 : ldb, b_js = tb ? ldb : 1;
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
      const int64_t kb = std::min(kc, K - k0);
      pack_b<Arch, T, NR>(kb, N, B + k0 * b_ks, b_ks, N == 1 ? 1 : b_js, dst + k0 / kc * packed_block(K, N),
                          panel_stride<T>(kb, NR));
    }
  }

  // One GEMM on up to nt threads. b_packed: op(B) as pack_whole_b left it (B is still passed: the
  // small-matrix path reads it in place). ep: what is done to C as it is stored.
  static void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc, int nt, const T* b_packed = nullptr,
                   const GemmEpilogue<T>& ep = {}) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0 || alpha == T(0)) {
      scale_c(M, N, beta, C, ldc, ep);
      return;
    }
    // op(A)(i, k) = A[i*lda + k] or A[k*lda + i]; op(B)(k, j) = B[k*ldb + j] or B[j*ldb + k]. When a
    // dimension is 1 its stride is irrelevant: call it contiguous so nothing gets packed for it.
    Problem pr{M, N, K, alpha, beta, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, C, ldc,
               b_packed};
    pr.ep = ep;
    if (K == 1) pr.a_cs = 1, pr.a_rs = ta ? 1 : lda;
    if (N == 1) pr.b_js = 1;
    const double flops = 2.0 * double(M) * double(N) * double(K);
    if (M == 1 && flops < kMaxRowFlops) {  // B itself, packed or not: the same bits
      one_row(pr);
      return activate_rows(ep, 0, 1, N, C, ldc);
    }
    nt = int(std::clamp<double>(flops / kMinFlopsPerThread, 1.0, double(nt)));
    // No more threads than tiles; none at all inside someone else's parallel region; and none while
    // a team costs more than it saves (see TeamCost).
    nt = int(std::min<int64_t>(nt, ceil_div(M, MR) * ceil_div(N, NR)));
    if (omp_in_parallel() || (nt > 1 && !team_cost().worth_it(single_thread_us(flops)))) nt = 1;
    if (split_depth(pr)) return gemm_split_depth(pr, nt);
    if (nt <= 1) {
      if (small(pr)) return;  // the same tiles, without the general path's set-up
      run_thread(pr, 0, 1, Units{1, 1}, nullptr, nullptr);
      return;
    }
    const Units units = choose_units(pr, nt);
    std::atomic<int64_t> next{0};
    TeamBarrier barrier(nt);
    TeamRun run(nt);
#pragma omp parallel num_threads(nt)
    {
      // The runtime may grant fewer threads than asked (OMP_DYNAMIC, thread limits): then thread 0
      // does it all, since the barrier counts on nt arrivals.
      const int tid = omp_get_thread_num();
      if (omp_get_num_threads() == nt)
        run_thread(pr, tid, nt, units, &next, &barrier, &run);
      else if (tid == 0)
        run_thread(pr, 0, 1, Units{1, 1}, nullptr, nullptr);
    }
    run.finish();
  }

  // A long-depth product with a small C (a weight gradient dW = dy^T x over a batch's 2048 rows) is
  // computed as two halves of the depth, C = act((beta C + bias + alpha A_lo B_lo) + alpha A_hi B_hi), the
  // upper half into a partial that is then added in. At two threads each half has a thread, which
  // packs and reads only its own rows of both operands: the rows the ops before the backward left
  // in that core's cache, where cutting C made both threads read and pack all of them. Whether to
  // split depends on the shape only, so the sum's order, and the result, do not depend on the
  // thread count. Median us, alternating calls, 2 threads, operands just rewritten by the row split,
  // Zen 5: 128x2048x128 tn 274 -> 203, 384x2048x128 650 -> 589, 128x2048x512 954 -> 894, 32x2048x128
  // 111 -> 63 (it had not scaled at all).
  static constexpr int64_t kSplitDepthMin = 1024;
  static constexpr int64_t kSplitDepthMaxC = int64_t(1) << 17;  // elements of C (512 KiB of float)
  static bool split_depth(const Problem& pr) {
    return !pr.b_packed && pr.K >= kSplitDepthMin && pr.K >= kLongDepth * std::max(pr.M, pr.N) &&
           pr.M * pr.N <= kSplitDepthMaxC;
  }
  static void gemm_split_depth(const Problem& pr, int nt) {
    Problem lo = pr, hi = pr;
    lo.K = ceil_div(pr.K, 2);
    hi.K = pr.K - lo.K;
    hi.a = pr.a + lo.K * pr.a_cs;
    hi.b = pr.b + lo.K * pr.b_ks;
    lo.ep.act = GemmAct::none;  // activated as the halves are added
    hi.beta = T(0), hi.ep = {};
    hi.c = scratch<T>(2, pr.M * pr.N), hi.ldc = pr.N;
    auto add_rows = [&](int64_t i0, int64_t i1) {  // C += the upper half's partial
      for (int64_t i = i0; i < i1; ++i) {
        T* c = pr.c + i * pr.ldc;
        const T* p = hi.c + i * pr.N;
        for (int64_t j = 0; j < pr.N; ++j) c[j] += p[j];
      }
      activate_rows(pr.ep, i0, i1, pr.N, pr.c, pr.ldc);
    };
    auto one_thread = [&] {
      run_thread(lo, 0, 1, Units{1, 1}, nullptr, nullptr);
      run_thread(hi, 0, 1, Units{1, 1}, nullptr, nullptr);
      add_rows(0, pr.M);
    };
    if (nt <= 1) return one_thread();
    // Threads [0, n_lo) take the lower half, the rest the upper, each half cut as choose_units says.
    const int n_lo = nt / 2, n_hi = nt - n_lo;
    const Units u_lo = choose_units(lo, n_lo), u_hi = choose_units(hi, n_hi);
    std::atomic<int64_t> next_lo{0}, next_hi{0};
    TeamBarrier barrier_lo(n_lo), barrier_hi(n_hi), all(nt);
    TeamRun run(nt);
#pragma omp parallel num_threads(nt)
    {
      const int tid = omp_get_thread_num();
      if (omp_get_num_threads() != nt) {  // fewer threads granted than asked: thread 0 does it all
        if (tid == 0) one_thread();
      } else {
        const auto t0 = TeamRun::Clock::now();
        if (tid < n_lo)
          run_thread(lo, tid, n_lo, u_lo, &next_lo, &barrier_lo);
        else
          run_thread(hi, tid - n_lo, n_hi, u_hi, &next_hi, &barrier_hi);
        run.report(tid, 1.0, t0, TeamRun::Clock::now());  // each thread's share of its half
        all.wait();
        const Range r = balanced_split(pr.M, tid, nt);
        add_rows(r.begin, r.end);
        all.wait();
      }
    }
    run.finish();
  }

  // One row of C (M == 1: an attention context weights [1, S] x keys [S, H], a matrix-vector
  // product). A register tile would run one row of MR, and no load of B is ever reused, so B is
  // streamed once instead: four vectors of C at a time over the whole depth when B is row-major,
  // four dot products at a time when it is stored transposed. One thread: reading B is the limit.
  // The batch of 64 such products of an attention GRU step ran at 9.5 GFLOP/s through the tiles.
  static constexpr double kMaxRowFlops = 4.0e6;
  // The sum of a vector's lanes. xsimd's for a double AVX-512 vector goes through GCC 12's plain
  // _mm512_extractf64x4_pd, which trips a false -Wmaybe-uninitialized (GCC PR 105593) once inlined
  // here; that case (double, only ever checked, never timed) sums through memory instead.
  static T sum_lanes(const xsimd::batch<T, Arch>& v) {
    if constexpr (std::is_same_v<T, double> && std::is_base_of_v<xsimd::avx512f, Arch>) {
      alignas(64) T lanes[W];
      v.store_aligned(lanes);
      T sum = 0;
      for (int i = 0; i < W; ++i) sum += lanes[i];
      return sum;
    } else {
      return xsimd::hadd(v);
    }
  }
  static void one_row(const Problem& pr) {
    using V = xsimd::batch<T, Arch>;
    const int64_t N = pr.N, K = pr.K;
    const T* a = pr.a;  // op(A)(0, k) = a[k * a_cs]
    const int64_t as = pr.a_cs;
    auto put = [&](int64_t j, T sum) {  // BLAS semantics: beta = 0 never reads C
      T& c = pr.c[j];
      const T add = (pr.ep.bias ? pr.ep.bias[j] : T(0)) + (pr.beta == T(0) ? T(0) : pr.beta * c);
      c = pr.alpha * sum + add;
    };
    auto put_vector = [&](int64_t j, const V& sum) {
      V r = V(pr.alpha) * sum;
      if (pr.beta != T(0)) r = xsimd::fma(V(pr.beta), V::load_unaligned(pr.c + j), r);
      if (pr.ep.bias) r += V::load_unaligned(pr.ep.bias + j);
      r.store_unaligned(pr.c + j);
    };
    if (pr.b_js == 1) {  // c[j] = sum_k a_k b[k, j]: rows of B stream past four vectors of C
      int64_t j = 0;
      for (; j + 4 * W <= N; j += 4 * W) {
        V c0(T(0)), c1(T(0)), c2(T(0)), c3(T(0));
        for (int64_t k = 0; k < K; ++k) {
          const V ak(a[k * as]);
          const T* b = pr.b + k * pr.b_ks + j;
          c0 = xsimd::fma(ak, V::load_unaligned(b), c0);
          c1 = xsimd::fma(ak, V::load_unaligned(b + W), c1);
          c2 = xsimd::fma(ak, V::load_unaligned(b + 2 * W), c2);
          c3 = xsimd::fma(ak, V::load_unaligned(b + 3 * W), c3);
        }
        put_vector(j, c0), put_vector(j + W, c1), put_vector(j + 2 * W, c2), put_vector(j + 3 * W, c3);
      }
      for (; j + W <= N; j += W) {
        V c0(T(0));
        for (int64_t k = 0; k < K; ++k)
          c0 = xsimd::fma(V(a[k * as]), V::load_unaligned(pr.b + k * pr.b_ks + j), c0);
        put_vector(j, c0);
      }
      for (; j < N; ++j) {
        T sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += a[k * as] * pr.b[k * pr.b_ks + j];
        put(j, sum);
      }
      return;
    }
    // B stored transposed: c[j] = a . (row j of the stored B), the depth contiguous in both (a
    // strided A is gathered first).
    if (as != 1) {
      T* g = scratch<T>(0, K);
      for (int64_t k = 0; k < K; ++k) g[k] = a[k * as];
      a = g;
    }
    const int64_t kv = K / W * W;
    auto dot_tail = [&](const T* b, int64_t k0) {
      T sum = 0;
      for (int64_t k = k0; k < K; ++k) sum += a[k] * b[k];
      return sum;
    };
    int64_t j = 0;
    for (; j + 4 <= N; j += 4) {
      const T* b0 = pr.b + j * pr.b_js;
      const T *b1 = b0 + pr.b_js, *b2 = b1 + pr.b_js, *b3 = b2 + pr.b_js;
      V s0(T(0)), s1(T(0)), s2(T(0)), s3(T(0));
      for (int64_t k = 0; k < kv; k += W) {
        const V ak = V::load_unaligned(a + k);
        s0 = xsimd::fma(ak, V::load_unaligned(b0 + k), s0);
        s1 = xsimd::fma(ak, V::load_unaligned(b1 + k), s1);
        s2 = xsimd::fma(ak, V::load_unaligned(b2 + k), s2);
        s3 = xsimd::fma(ak, V::load_unaligned(b3 + k), s3);
      }
      put(j, sum_lanes(s0) + dot_tail(b0, kv));
      put(j + 1, sum_lanes(s1) + dot_tail(b1, kv));
      put(j + 2, sum_lanes(s2) + dot_tail(b2, kv));
      put(j + 3, sum_lanes(s3) + dot_tail(b3, kv));
    }
    for (; j < N; ++j) {
      const T* b = pr.b + j * pr.b_js;
      V s0(T(0));
      for (int64_t k = 0; k < kv; k += W)
        s0 = xsimd::fma(V::load_unaligned(a + k), V::load_unaligned(b + k), s0);
      put(j, sum_lanes(s0) + dot_tail(b, kv));
    }
  }

  // The small-matrix path: one depth block, both operands read in place, no edge that needs a
  // packed panel. Nothing to set up but the tile loops, which matters when the whole product takes
  // ~300 ns (32^3, attention): the general path's block arithmetic (a dozen 64-bit divisions) and
  // buffer lookups cost 65 ns of that. Returns false (doing nothing) if the problem does not qualify.
  static bool small(const Problem& pr) {
    const bool ak = pr.a_cs != 1;
    if (pr.K > blocking<T, Tile>().kc || pr.pack_a() || pr.pack_b() || pr.N % W != 0) return false;
    const int64_t lda = ak ? pr.a_cs : pr.a_rs;
    const int left = int(pr.M % MR);  // rows below the last whole tile (see bottom_edge_kernels)
    const MicroKernelFn<T>* bottom = ak ? bottom_edge_kernels<Arch, T, MR, NV, true>(left)
                                        : bottom_edge_kernels<Arch, T, MR, NV, false>(left);
    for (int64_t i = 0; i < pr.M; i += MR) {
      const T* ap = ak ? pr.a + i : pr.a + i * lda;
      const int rows = int(std::min<int64_t>(MR, pr.M - i));
      for (int64_t j = 0; j < pr.N; j += NR) {
        const int cols = int(std::min<int64_t>(NR, pr.N - j));
        T* c = pr.c + i * pr.ldc + j;
        const T* bp = pr.b + j;
        GemmEpilogue<T> te;
        const GemmEpilogue<T>* ep = pr.tile_epilogue(i, j, 0, pr.K, te);
        if (rows < MR && bottom) {
          bottom[cols / W - 1](pr.K, ap, lda, bp, pr.b_ks, c, pr.ldc, pr.alpha, pr.beta, rows, cols, nullptr,
                               nullptr, ep);
        } else if (cols == NR) {
          if (ak)
            micro_kernel<Arch, T, MR, NV, true>(pr.K, ap, lda, bp, pr.b_ks, c, pr.ldc, pr.alpha, pr.beta,
                                                rows, cols, nullptr, nullptr, ep);
          else
            micro_kernel<Arch, T, MR, NV, false>(pr.K, ap, lda, bp, pr.b_ks, c, pr.ldc, pr.alpha, pr.beta,
                                                 rows, cols, nullptr, nullptr, ep);
        } else {
          const auto fn = ak ? kernels<true>().fn[cols / W - 1] : kernels<false>().fn[cols / W - 1];
          fn(pr.K, ap, lda, bp, pr.b_ks, c, pr.ldc, pr.alpha, pr.beta, rows, cols, nullptr, nullptr, ep);
        }
      }
    }
    return true;
  }

  // The one-thread time (microseconds) of `flops`, as measured on Zen 5 at ~3.5 GHz: ~85% of two
  // W-wide FMAs per cycle (190 GFLOP/s for AVX-512 float). Erring high here would hand teams to
  // GEMMs that they slow down: at 1024^3 under load a team run lost 5-13 ms against 10.5 ms alone.
  static double single_thread_us(double flops) {
    return flops / (0.85 * 2 * 2 * W * 3.5e3);
  }

  // Batched: small matrices go one per thread (no barriers, private buffers); large ones, or a
  // batch too short to balance, go one after another with the team inside each.
  static void gemm_batched(const BatchLayout& layout, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                           T alpha, const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C,
                           int64_t ldc, int nt) {
    const int64_t batch = layout.count();
    if (batch <= 0 || M <= 0 || N <= 0) return;
    auto one = [&](int64_t m, int threads) {
      gemm(ta, tb, M, N, K, alpha, A + layout.offset(0, m), lda, B + layout.offset(1, m), ldb, beta,
           C + layout.offset(2, m), ldc, threads);
    };
    const double flops = 2.0 * double(M) * double(N) * double(K);
    if (omp_in_parallel() || !team_cost().worth_it(single_thread_us(flops * double(batch)))) nt = 1;
    const bool per_matrix_team =
        batch == 1 || nt == 1 || (flops >= kMinFlopsPerMatrixTeam && batch % nt != 0 && batch < 4 * nt);
    if (per_matrix_team) {
      for (int64_t m = 0; m < batch; ++m) one(m, nt);
      return;
    }
    // Thread t takes the t-th contiguous run of matrices, as the elementwise kernels split rows
    // (parallel_ranges in common.hpp): attention's heads of sequence b are rows of b's tokens, which
    // the ops before and after leave in the same core's cache. Which thread computes a matrix
    // changes no result.
    const int team = int(std::min<int64_t>(nt, batch));
    TeamBarrier barrier(team);
    TeamRun run(team);
#pragma omp parallel num_threads(team)
    {
      const auto t0 = TeamRun::Clock::now();
      const Range r = balanced_split(batch, omp_get_thread_num(), omp_get_num_threads());
      for (int64_t m = r.begin; m < r.end; ++m) one(m, 1);
      if (omp_get_num_threads() == team) {
        run.report(omp_get_thread_num(), double(r.end - r.begin), t0, TeamRun::Clock::now());
        barrier.wait();
      }
    }
    run.finish();
  }
};

}  // namespace tapegrad::kernels::simd::gemm_detail
