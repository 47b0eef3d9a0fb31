#include "worker/engine/hf/hf_model_reader.h"

#include "worker/engine/hf/hf_model_source.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

absl::StatusOr<CheckpointModel> read_hf_model(const std::filesystem::path& dir) {
  FP8_ASSIGN_OR_RETURN(const HfModelSource source, HfModelSource::open(dir));
  CheckpointModel out;
  out.step_dir = dir;
  out.spec = source.spec();
  out.config = source.config();
  for (const ParameterShape& p : llama_parameter_shapes(out.config)) {
    FP8_ASSIGN_OR_RETURN(std::vector<float> values, source.read_rows(p, 0, p.shape[0]));
    out.parameters.push_back(NamedTensor{p.name, p.shape, std::move(values)});
  }
  return out;
}

}  // namespace fp8::hf
