// OpenBLAS settings that must be in the environment before the process starts.
//
// OpenBLAS's idle worker threads spin (calling sched_yield) for about 2^28 cycles after
// each call before they sleep. A training step makes hundreds of small GEMM calls, so with
// the defaults those threads never sleep: they compete with the kernels' own thread pool
// and, on a loaded machine with few cores, made fp8-train's steps much slower (most of it
// system time; see bench/RESULTS.md). OPENBLAS_THREAD_TIMEOUT=4 (2^4 cycles) lets them
// sleep at once and changes no result bit. OpenBLAS reads it in its library constructor,
// before main(), so the only way to set it from inside is to run the program again with it
// set.
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace fp8::train_cli {

// Re-executes this program with OPENBLAS_THREAD_TIMEOUT set, unless the environment has
// one already (a user's choice is kept). If the re-exec fails, it carries on as it is.
inline void ensure_blas_environment(char** argv) {
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr) return;
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", /*overwrite=*/1);
  execv("/proc/self/exe", argv);
}

}  // namespace fp8::train_cli
