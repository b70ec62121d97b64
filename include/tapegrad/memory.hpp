/// @file
/// The caching allocator behind every tensor's storage.
///
/// Blocks are 64-byte aligned and rounded up to size classes (four per power of two, so at most 25%
/// waste). A freed block goes onto its class's free list and is handed out again; the OS is asked for
/// memory only when a list is empty. After the first training step a steady-state step therefore maps
/// no new pages (a first touch of a fresh page costs ~12 us on the VMs we run on). Thread-safe.
#pragma once

#include <cstdint>

/// The caching allocator (see memory.hpp).
namespace tapegrad::memory {

/// The allocator's counters, process-wide.
struct Stats {
  int64_t bytes_in_use = 0;       ///< handed out and not yet returned
  int64_t bytes_cached = 0;       ///< on free lists
  int64_t os_allocations = 0;     ///< blocks ever requested from the OS
  int64_t cache_hits = 0;         ///< allocations served from a free list
  int64_t peak_bytes_in_use = 0;  ///< high-water mark of bytes_in_use since reset_peak()
};

/// Returns a block of at least `bytes` (>= 1) and writes its capacity (the size class) to `*capacity`;
/// give it back with release(ptr, capacity).
/// @throws OutOfMemory (naming the bytes) when `bytes` exceeds machine_limit_bytes() or the OS refuses,
/// never std::bad_alloc.
void* allocate(int64_t bytes, int64_t* capacity);
/// Puts a block from allocate back on its free list. Never allocates and never throws: it runs in
/// ~Storage, also while an exception unwinds.
void release(void* ptr, int64_t capacity) noexcept;
/// The most memory this process can hold: physical memory, or the address-space limit (RLIMIT_AS,
/// `ulimit -v`) when that is lower. Read once per process.
int64_t machine_limit_bytes();
/// A snapshot of the counters.
Stats stats();
/// Starts a new high-water mark at the current bytes_in_use (what the tape instrument measures a step by).
void reset_peak();
/// Gives every cached block back to the OS.
void empty_cache();

}  // namespace tapegrad::memory
