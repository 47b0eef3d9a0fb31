// The training FLOPs of one token of a job's model, the numerator of model FLOPs
// utilisation (MFU) as the field counts it (PaLM, appendix B): 6 per weight of every
// linear layer (2 in the forward, 4 in the backward), the output projection included,
// plus attention's 12 · n_layers · dim · seq_len (QKᵀ and PV, forward and backward, with
// no discount for the causal mask). The embedding lookup, norms and pointwise ops count
// nothing, and neither does recomputation under activation checkpointing: MFU counts the
// model's work, not the hardware's.
#pragma once

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// 0 for a model whose shape is not fully known (model_shape_is_known).
double training_flops_per_token(const v1::JobSpec& spec);

}  // namespace fp8::jobspec
