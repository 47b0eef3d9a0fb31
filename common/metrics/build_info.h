// fp8_build_info{version, component} 1: which build of which daemon is running, so that
// dashboards can group or annotate by version (deploy/METRICS.md).
#pragma once

#include <string>

#include "common/metrics/registry.h"

namespace fp8::metrics {

// component: "coordinator" or "worker"; version: the product version string.
void register_build_info(Registry& registry, const std::string& component,
                       const std::string& version);

}  // namespace fp8::metrics
