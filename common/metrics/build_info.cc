#include "common/metrics/build_info.h"

namespace fp8::metrics {

void register_build_info(Registry& registry, const std::string& component,
                       const std::string& version) {
  registry
      .gauge("fp8_build_info", "Build of the running daemon (always 1).",
             {"version", "component"})
      .with({version, component})
      .set(1);
}

}  // namespace fp8::metrics
