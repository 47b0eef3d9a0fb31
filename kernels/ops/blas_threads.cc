#include "ops/blas_threads.h"

#include <cblas.h>

#include <mutex>

namespace fp8::ops::cpu {
namespace {

std::mutex g_mu;
int g_active = 0;         // live guards, across all threads
int g_saved_threads = 0;  // OpenBLAS's thread count before the first guard

}  // namespace

SingleThreadedBlas::SingleThreadedBlas() {
  std::lock_guard lock(g_mu);
  if (g_active++ == 0) {
    g_saved_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
  }
}

SingleThreadedBlas::~SingleThreadedBlas() {
  std::lock_guard lock(g_mu);
  if (--g_active == 0) openblas_set_num_threads(g_saved_threads);
}

}  // namespace fp8::ops::cpu
