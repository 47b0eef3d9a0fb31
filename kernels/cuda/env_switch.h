// The CUDA backend's switches: environment variables read where they apply, most at every
// launch (a getenv is nothing beside a kernel), so that a benchmark times a switch beside
// its default in one process (bench_train's RECIPE@NAME=VALUE, bench_cast, bench_attention).
#pragma once

#include <cstdlib>
#include <cstring>

namespace fp8::cuda {

// Whether the environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
  const char* e = std::getenv(name);
  return e != nullptr && std::strcmp(e, value) == 0;
}

}  // namespace fp8::cuda
