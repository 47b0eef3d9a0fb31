// Validation of the fp8 section against the model it applies to: the recipe's and the
// long form's GEMMs are ones that exist, the layer filter names real layers, and every
// fp8 layer has the multiple-of-16 dimensions fp8 GEMMs need (with parallel.tensor, each
// rank's share of it too).
#pragma once

#include "common/jobspec/checks.h"
#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

void check_fp8(const v1::JobSpec& spec, Checks& checks);

}  // namespace fp8::jobspec
