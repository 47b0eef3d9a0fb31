// Which linear layers train in fp8, and with which config: the module filter.
//
// A layer is fp8 when the recipe is not `none`, its name passes fp8.include / fp8.exclude
// (the output projection is excluded by default), and its dimensions suit fp8 GEMMs:
// in_features and out_features multiples of 16, unless fp8.pad_inner_dim is set. Every
// other layer runs the `none` recipe, in high precision. The job validator applies the
// same rule and rejects jobs that ask for fp8 on a layer that cannot have it; here it
// keeps specs built in code (tests, benchmarks) honest.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/float8/config.h"

namespace fp8::engine {

struct LinearSelection {
  bool fp8 = false;
  Float8LinearConfig config;  // recipe `none` when !fp8
  std::string reason;         // why the layer is high precision; empty when fp8
};

absl::StatusOr<LinearSelection> select_linear(const v1::Fp8Spec& fp8, const std::string& name, int64_t in_features,
                                              int64_t out_features);

}  // namespace fp8::engine
