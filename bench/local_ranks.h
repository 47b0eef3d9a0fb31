// Local ranks for the distributed benchmarks: one function run as N forked processes that
// meet through a file store in a fresh temporary directory.
//
// Fork, not spawn: every rank starts from the parent's parsed options, with nothing to
// serialise. fork() copies only the calling thread, so the caller must fork before it
// starts any thread, thread pool, Gloo context or CUDA context of its own; the ranks create
// theirs after the fork. (OpenBLAS, which starts its threads when the program loads, stops
// them at fork() by itself and restarts them in the child on first use.)
#pragma once

#include <filesystem>
#include <functional>

namespace fp8::bench {

// rank_main(rank, dir) runs in each of `n` forked children, which exit with its return
// value; `dir` is a fresh directory (under $TMPDIR or /tmp) for the rendezvous and any
// files the ranks hand back, removed after `after(dir)` ran in the parent once every rank
// is done. A rank that fails (non-zero exit or a signal) gets the others killed at once,
// rather than left waiting for it in a collective until their timeout. Returns true when
// every rank exited 0; otherwise says on stderr which failed and returns false (`after`
// does not run).
bool run_local_ranks(int n, const std::function<int(int rank, const std::filesystem::path& dir)>& rank_main,
                     const std::function<void(const std::filesystem::path& dir)>& after = {});

}  // namespace fp8::bench
