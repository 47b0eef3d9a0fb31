// The product version of this build (CMake's project version, so that fp8ctl, the
// coordinator and the worker report the same one), shown by `fp8ctl version` and
// fp8_build_info.
#pragma once

#ifndef FP8_VERSION
#error "FP8_VERSION comes from the fp8_version target; link it"
#endif

namespace fp8 {

inline constexpr char kVersion[] = FP8_VERSION;

}  // namespace fp8
