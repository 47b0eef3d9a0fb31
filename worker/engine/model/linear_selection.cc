#include "worker/engine/model/linear_selection.h"

#include "absl/strings/str_cat.h"
#include "common/jobspec/module_filter.h"

namespace fp8::engine {

namespace {
constexpr int64_t kFp8GemmMultiple = 16;
}

absl::StatusOr<LinearSelection> select_linear(const v1::Fp8Spec& fp8, const std::string& name, int64_t in_features,
                                              int64_t out_features) {
  LinearSelection s;
  if (fp8.recipe() == v1::Fp8Spec::NONE) {
    s.reason = "recipe none";
  } else if (!jobspec::is_float8_linear(fp8, name)) {
    s.reason = "excluded by fp8.include/fp8.exclude";
  } else if (!fp8.pad_inner_dim() && (in_features % kFp8GemmMultiple != 0 || out_features % kFp8GemmMultiple != 0)) {
    s.reason = absl::StrCat(in_features, " -> ", out_features, " is not a multiple of 16");
  } else {
    s.fp8 = true;
  }
  absl::StatusOr<Float8LinearConfig> config =
      s.fp8 ? config_from_spec(fp8) : recipe_config(v1::Fp8Spec::NONE);
  if (!config.ok()) return config.status();
  s.config = *config;
  return s;
}

}  // namespace fp8::engine
