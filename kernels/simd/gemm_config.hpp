// GEMM configuration: the register tile (MR x NR) per instruction set and element type, the cache
// block sizes derived from cache_info(), and the thread-local packing buffers.
//
// Every number that shapes the GEMM lives here so that tuning touches one file. Roles, in row-major
// terms (C is M x N, rows of C are contiguous):
//   - NR (the vector side) runs along N: a micro-tile row is NR/W vectors of C.
//   - MR (the broadcast side) runs along M: each element of MR rows of A is broadcast in turn.
//   - kc: depth of a block. MR rows of A (MR x kc) stay in L1 while the inner loop streams every
//     B micro-panel (kc x NR) of the packed B block past them.
//   - nc: columns of the packed B block (kc x nc), sized to stay in one core's L2 while every row
//     of A streams past it.
// This is BLIS's loop nest for the transposed problem (C^T = B^T A^T, column-major) without its
// L3 block of packed A: the kernel reads A rows in place (gemm_micro.hpp). Also here: the
// thread-local packing buffers and what decides whether a thread team pays (TeamCost). Not here:
// the loops (gemm_driver.hpp), the packing (gemm_pack.hpp), the micro-kernel (gemm_micro.hpp).
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string_view>
#include <type_traits>
#include <vector>
#include <xsimd/xsimd.hpp>

#include "kernels/kernels.hpp"

namespace tapegrad::kernels::simd::gemm_detail {

// The register tile for each (Arch, T), chosen by measurement on Zen 5 (bench/bench_gemm.cpp):
//   AVX-512: 6 rows x 4 vectors = 24 zmm accumulators, enough independent FMAs to cover two 512-bit
//            FMA pipes at 4 cycles of latency, with 10 loads (4 of B, 6 broadcasts of A) per 24 FMAs.
//            It beat 14 x 2, 12 x 2 and 8 x 3 at 1024^3 by 3-7%, and its C tile touches 6 rows
//            instead of 14 (fewer L1 set conflicts on power-of-two ldc).
//   AVX2:    6 x 2 vectors = 12 ymm accumulators of 16 (the classic Haswell tile).
//   SSE2:    6 x 2 vectors; no FMA, so multiply and add are separate (12 + 2 + 2 of 16 xmm).
template <class Arch, class T>
struct MicroTile {
  using V = xsimd::batch<T, Arch>;
  static constexpr int W = int(V::size);
  static constexpr bool avx512 = std::is_base_of_v<xsimd::avx512f, Arch>;
  static constexpr int MR = 6;
  static constexpr int NV = avx512 ? 4 : 2;  // vectors per tile row
  static constexpr int NR = NV * W;
};

// The tile for narrow problems, N <= NR: 8 rows x 2 vectors (16 accumulators) on AVX-512, where a
// 6 x 64 tile would run half empty. Attention's products all have N = head_dim, 32 in our models,
// and T x T blocks of 32 rows split into 8-row tiles with no ragged edge (6-row tiles leave a
// 2-row one, 12% of the time for 6% of the work). Elsewhere the ordinary tile is already narrow.
template <class Arch, class T>
struct NarrowTile {
  using V = xsimd::batch<T, Arch>;
  static constexpr int W = int(V::size);
  static constexpr bool enabled = MicroTile<Arch, T>::avx512;
  static constexpr int MR = enabled ? 8 : MicroTile<Arch, T>::MR;
  static constexpr int NV = 2;
  static constexpr int NR = NV * W;
};

// Cache block sizes (elements). See the file comment for the role of each.
struct Blocking {
  int64_t kc, nc;
};

inline int64_t round_down(int64_t x, int64_t m) {
  return std::max(m, x / m * m);
}
inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}
inline int64_t ceil_div(int64_t x, int64_t m) {
  return (x + m - 1) / m;
}

// Derived from the cache sizes once per (T, Tile):
//   kc: the A micro-panel (MR x kc) takes about half of L1d, the rest holds the streaming B panel.
//   nc: the B block (kc x nc) takes about half of L2, leaving room for A panels and C.
// TAPEGRAD_GEMM_KC / _NC override them (for tuning; read once).
inline int64_t env_block(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  const long long x = v ? std::atoll(v) : 0;
  return x > 0 ? int64_t(x) : fallback;
}

template <class T, class Tile>
const Blocking& blocking() {
  static const Blocking b = [] {
    const CacheInfo& ci = cache_info();
    const int64_t sz = int64_t(sizeof(T));
    Blocking r;
    r.kc = std::clamp<int64_t>(round_down(ci.l1d / 2 / (Tile::MR * sz), 16), 128, 512);
    r.kc = env_block("TAPEGRAD_GEMM_KC", r.kc);
    r.nc = std::clamp<int64_t>(round_down(ci.l2 / 2 / (r.kc * sz), Tile::NR), Tile::NR, 4096);
    r.nc = round_up(env_block("TAPEGRAD_GEMM_NC", r.nc), Tile::NR);
    return r;
  }();
  return b;
}

// Below this many flops (2*M*N*K) per thread a GEMM does not even consider a team; TeamCost
// decides above it. A warm fork/join alone costs about a microsecond on a quiet machine (0.25 MFLOP
// of one core), but at 0.25 MFLOP the small Transformer's step on two threads ran 12-17% slower
// (130-138 ms against 115-117, alternating runs): its many small products inside the step paid
// for teams that a lone 64^3 in a benchmark loop pays off. So 64^3 (0.5 MFLOP) stays on one thread.
inline constexpr double kMinFlopsPerThread = 1.0e6;
// A batched GEMM runs a team inside each matrix rather than a matrix per thread only from this
// size of matrix up (and only when the batch does not divide evenly, see gemm_batched).
inline constexpr double kMinFlopsPerMatrixTeam = 16.0e6;
// Row-major B up to this many bytes (K x N) is read in place instead of packed (see gemm_driver.hpp).
inline constexpr int64_t kMaxUnpackedB = 64 << 10;
// Transposed A up to this many bytes (M x K) is read in place instead of transposed; twice as many
// for a tile four vectors wide (AVX-512), whose 24 FMAs per k share the MR elements of A's column
// that a 6 x 2 tile spends on 12: in place, 128^3 tn and tt ran 2-6% faster on AVX-512 at 1 thread
// and 8-15% at 2 (four alternating rounds), and 12-20% slower on AVX2 at 1 thread, on one Xeon.
template <class Tile>
constexpr int64_t max_unpacked_a() {
  return Tile::NV >= 4 ? 64 << 10 : 32 << 10;
}

// ---------------------------------------------------------------------------------------------
// Packing buffers: thread-local, 64-byte aligned, grown geometrically and never freed while the
// thread lives, so steady-state calls touch no fresh pages (a first touch costs ~12 us here).
// Slot 0 holds a thread's chunk of transposed A, slot 1 its B block.
class Scratch {
 public:
  ~Scratch() { std::free(p_); }
  void* get(size_t bytes) {
    if (bytes > cap_) {
      std::free(p_);
      cap_ = std::max(bytes + bytes / 2, size_t(64) << 10);
      cap_ = (cap_ + 4095) / 4096 * 4096;
      p_ = std::aligned_alloc(4096, cap_);
      if (!p_) throw std::bad_alloc();
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

// Per-thread buffers: slot 0 transposed A, slot 1 B's panels (gemm_driver.hpp run_unit), slot 2 the
// partial product of a depth split (split_depth), which the calling thread lends to its team; slot 3
// the fused attention kernels' buffers (sdpa.hpp ThreadBuffers).
template <class T>
T* scratch(int slot, int64_t elems) {
  thread_local Scratch s[4];
  return static_cast<T*>(s[slot].get(size_t(elems) * sizeof(T)));
}

// ---------------------------------------------------------------------------------------------
// A team barrier that yields. libgomp's own barriers spin (GOMP_SPINCOUNT, ~5 ms here) before they
// sleep, so on a machine shared with other work a thread waiting for a descheduled partner that sits
// on the same core burns the partner's time slice: 256^3 on 2 threads took 12 ms instead of 0.15 ms
// while two other test programs ran. Here a waiter spins briefly, then calls sched_yield() so a
// partner queued on the same core runs (OpenBLAS's thread server does the same).
class TeamBarrier {
 public:
  explicit TeamBarrier(int n) : n_(n) {}
  void wait() {
    const int gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(gen + 1, std::memory_order_release);
      return;
    }
    for (int spin = 0; generation_.load(std::memory_order_acquire) == gen; ++spin) {
      if (spin < 4000)
        __builtin_ia32_pause();
      else
        sched_yield();
    }
  }

 private:
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<int> generation_{0};
  int n_;
};

// ---------------------------------------------------------------------------------------------
// What a thread team costs right now. On a quiet machine a fork/join plus the final rendezvous
// costs a few microseconds. On a machine shared with other work a thread may wait milliseconds for
// a core: with compilers running, a two-thread 128^3 GEMM (20 us of work) took 14 ms, where
// OpenBLAS merely fell to one thread's speed. So every team run records the time it lost against a
// perfectly parallel run (TeamRun), and a GEMM takes a team only when half its one-thread time
// exceeds the estimate: the median of the last five losses, so that one outlier (the first run,
// which starts the threads and first-touches their buffers, or one preemption) does not switch
// teams off, while lasting contention does. The estimate halves every 25 ms without news, and a
// probe that loses little replaces the history (see record), so after the machine quietens GEMMs go
// back to teams at the first good probe; under lasting load that costs a few slow calls per period.
// TAPEGRAD_GEMM_TEAM=always skips the estimate (tests use it to exercise the team code whatever the load).
class TeamCost {
 public:
  using Clock = std::chrono::steady_clock;

  static double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

  // Should a GEMM that takes about `single_us` on one thread use a team?
  bool worth_it(double single_us) const { return always_ || single_us >= 2.0 * estimate_us(Clock::now()); }

  // A team run that started at `start` lost `lost_us`, of which `wake_us` went on waking the
  // other threads. That part counts only if the team was warm: libgomp's threads spin for a few
  // milliseconds after a region and then sleep, and waking a sleeping thread on this VM took up to
  // milliseconds, a price a run of back-to-back GEMMs pays once. Charging it to every probe would
  // keep a quiet machine from ever using teams for small GEMMs (256^3 ran at 0.84x OpenBLAS).
  void record(Clock::time_point start, double lost_us, double wake_us) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    const bool warm = micros(start - last_end_) < 4000.0;
    last_end_ = now;
    const double lost = std::clamp(lost_us - (warm ? 0.0 : wake_us), 0.0, 1e6);
    // Slow to give teams up, quick to take them back: one probe that lost under a quarter of the
    // estimate replaces the history, since the losses that raised it are gone. Without this, the
    // one-time costs of a fresh team (threads created, their buffers first touched, vCPUs woken:
    // 4-14 ms each on this VM) filled the median for whole seconds of a quiet machine, and a
    // 2048x128x512 product ran on one thread of two (95 GFLOP/s where a team gives 155).
    if (lost * 4 < median_us_.load(relaxed))
      std::fill(recent_, recent_ + kRecent, lost);
    else
      recent_[next_++ % kRecent] = lost;
    double sorted[kRecent];
    std::copy(recent_, recent_ + kRecent, sorted);
    std::nth_element(sorted, sorted + kRecent / 2, sorted + kRecent);
    median_us_.store(sorted[kRecent / 2], relaxed);
    stamp_.store(now.time_since_epoch().count(), relaxed);
  }

  double estimate_us(Clock::time_point now) const {
    const double age_ms = micros(now - Clock::time_point(Clock::duration(stamp_.load(relaxed)))) * 1e-3;
    return std::max(kFloorUs, median_us_.load(relaxed) * std::exp2(-age_ms / kHalfLifeMs));
  }

 private:
  static constexpr auto relaxed = std::memory_order_relaxed;
  // The estimate's half-life without news. At 200 ms, the three slow team runs at a process's start
  // kept 128^3 on one thread for over a second of a quiet machine (83 GFLOP/s on two threads where
  // the team gives 150); at 25 ms an estimate of 1 ms decays to the floor in a quarter of a second.
  static constexpr double kHalfLifeMs = 25.0;
  // The least a team is assumed to lose: a warm fork/join and the closing rendezvous.
  static constexpr double kFloorUs = 1.0;
  static constexpr int kRecent = 5;
  const bool always_ = [] {
    const char* v = std::getenv("TAPEGRAD_GEMM_TEAM");
    return v && std::string_view(v) == "always";
  }();
  std::atomic<double> median_us_{kFloorUs};
  std::atomic<Clock::rep> stamp_{0};
  std::mutex mutex_;  // guards the rest: one lock per team run
  double recent_[kRecent] = {kFloorUs, kFloorUs, kFloorUs, kFloorUs, kFloorUs};
  unsigned next_ = 0;
  Clock::time_point last_end_{};
};

inline TeamCost& team_cost() {
  static TeamCost cost;
  return cost;
}

// The account of one team run: each thread reports when it started, how much work it did (tiles
// or matrices) and how long that took; the loss is the run's wall time minus the time the whole
// work would take split evenly at the fastest thread's rate. That counts fork/join latency and
// threads kept off a core by other work, but not a slow rate that every thread shares (a
// memory-bound shape). The latest start is reported separately as the wake-up cost.
class TeamRun {
 public:
  using Clock = TeamCost::Clock;
  explicit TeamRun(int nt) : start_(Clock::now()), slots_(size_t(nt)) {}
  void report(int tid, double units, Clock::time_point t0, Clock::time_point t1) {
    slots_[size_t(tid)] = {units, TeamCost::micros(t1 - t0), TeamCost::micros(t0 - start_)};
  }
  // After the parallel region.
  void finish() const {
    double best_rate = -1, total_units = 0, wake_us = 0;
    for (const Slot& s : slots_) {
      wake_us = std::max(wake_us, s.start_us);
      if (s.units <= 0) continue;
      const double rate = s.us / s.units;
      best_rate = best_rate < 0 ? rate : std::min(best_rate, rate);
      total_units += s.units;
    }
    if (best_rate < 0) return;
    const double ideal_us = total_units * best_rate / double(slots_.size());
    team_cost().record(start_, TeamCost::micros(Clock::now() - start_) - ideal_us, wake_us);
  }

 private:
  struct alignas(64) Slot {
    double units = 0, us = 0, start_us = 0;
  };
  Clock::time_point start_;
  std::vector<Slot> slots_;
};

}  // namespace tapegrad::kernels::simd::gemm_detail
