#include "common/jobspec/model_flops.h"

#include "common/jobspec/model_shapes.h"

namespace fp8::jobspec {

double training_flops_per_token(const v1::JobSpec& spec) {
  const v1::ModelSpec& model = spec.model();
  if (!model_shape_is_known(model)) return 0;
  double linear_weights = 0;
  for (const LinearLayer& l : list_linear_layers(model)) {
    // The output projection's rows past the vocabulary pad it for the GEMMs: no model work.
    const int64_t out = l.name == "output" ? model.vocab_size() : l.out_features;
    linear_weights += static_cast<double>(l.in_features) * static_cast<double>(out);
  }
  const double attention = 12.0 * static_cast<double>(model.n_layers()) * static_cast<double>(model.dim()) *
                           static_cast<double>(spec.data().seq_len());
  return 6.0 * linear_weights + attention;
}

}  // namespace fp8::jobspec
