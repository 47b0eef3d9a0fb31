// A job spec written back as job.yaml text (what `fp8ctl describe` prints): fields in
// the order job.proto declares them, enums by their lower-case names, numbers in their
// shortest exact form. Loading the text gives back an equal spec.
#pragma once

#include <string>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

std::string to_yaml(const v1::JobSpec& spec);

}  // namespace fp8::jobspec
