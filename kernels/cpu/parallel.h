// A small persistent thread pool for the CPU kernels.
//
// Casts and reductions are memory-bound loops that need a few threads to saturate
// bandwidth; spawning threads per call would cost more than the work for mid-sized
// tensors. The pool is created on first use with set_num_threads()'s count (one per
// hardware thread when never set), and the calling thread always takes part.
#pragma once

#include <cstdint>
#include <functional>

namespace fp8::cpu {

// Sizes the pool (n >= 1) before its first use. The chunking of every kernel follows the
// count, so results are bit-identical for a given count; once the pool exists its size is
// fixed, and this returns false (as for n < 1) without changing anything.
bool set_num_threads(int n);
// The count the pool has, or will have when first used.
int configured_num_threads();
// The pool's size (creates the pool).
int num_threads();

// Number of chunks parallel_for will split [0, n) into for this grain: at most
// num_threads(), each at least `grain` long (the last may be shorter). Deterministic, so
// callers can size per-chunk partial results before the call.
int64_t plan_chunks(int64_t n, int64_t grain);

// Runs fn(chunk, begin, end) for each chunk of [0, n) and returns when all are done.
// Chunks are contiguous and ordered by index. A call made from inside a chunk runs
// inline on the calling thread (no nested parallelism).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int64_t)>& fn);

}  // namespace fp8::cpu
