// Semantic validation of a resolved spec (defaults applied): ranges, then consistency
// between fields. Issues name the field at fault; the loader adds file:line:col.
#pragma once

#include "common/jobspec/issues.h"
#include "fp8/v1/job.pb.h"

#include <cstdint>

namespace fp8::jobspec {

// resources.world_size's bound.
inline constexpr int64_t kMaxWorldSize = 1 << 16;

// Every problem found, in no particular order (the caller sorts by position).
Issues find_spec_issues(const v1::JobSpec& spec);

}  // namespace fp8::jobspec
