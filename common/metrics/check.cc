#include "common/metrics/check.h"

#include <cstdio>
#include <cstdlib>

namespace fp8::metrics::internal {

void fatal(const std::string& message) {
  std::fprintf(stderr, "fp8 metrics: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace fp8::metrics::internal
