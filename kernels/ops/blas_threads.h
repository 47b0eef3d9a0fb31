// Keeps OpenBLAS from threading the sgemms that run inside the kernels' own parallel
// loops.
//
// Attention splits its work into (batch, head, query block) units across the thread pool
// and calls sgemm inside each unit. OpenBLAS's pthreads build would also spread every one
// of those sgemms over all cores, and it serves one threaded call at a time: both levels
// of threading together measured many times slower than either alone (bench/RESULTS.md).
// The OpenBLAS of Debian 12 (0.3.21) has no per-thread setting, so the setting is
// process-wide for the guard's lifetime: an sgemm issued meanwhile from another thread
// (fp8::Backend::gemm) runs single-threaded, slower but correct. Guards overlap safely
// across threads: the first one in sets one thread, the last one out restores the previous
// count.
#pragma once

namespace fp8::ops::cpu {

class SingleThreadedBlas {
 public:
  SingleThreadedBlas();
  ~SingleThreadedBlas();
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;
};

}  // namespace fp8::ops::cpu
