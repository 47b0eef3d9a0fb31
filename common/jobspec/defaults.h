// The defaults documented in proto/fp8/v1/job.proto, in one place. Some are constants
// (beta2 = 0.95); some derive from other fields (n_kv_heads = n_heads, min_lr = lr / 10).
// A derived default must follow its input when an override changes that input later, so
// derived defaults also know how to step aside (ForgetDerivedDefaults).
#pragma once

#include <string_view>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// Sets every unset scalar and enum to its default, constants first, then derived values
// from the fields they derive from. Optional sections (fp8, checkpoint, resources,
// restarts) are created; the required ones (model, data, train) are filled only when
// present, so that validation can still say they are missing. Idempotent.
void apply_defaults(v1::JobSpec& spec);

// fp8.exclude = ["output"]. A proto list cannot tell "left out" from "written empty", so
// only the loader, which saw the YAML, knows when to call this: when neither the file nor
// an override mentioned fp8.exclude.
void apply_default_exclude(v1::JobSpec& spec);

// Call before the field at `changed_path` ("model.dim", or a whole section "model") takes
// a new value in a resolved spec. Clears every field derived from it whose value still
// equals what it derives from the current value, so that ApplyDefaults derives it again
// from the new one: after `model.dim=128`, a defaulted ffn_dim follows the new dim. A
// derived field holding any other value was chosen by the user and is kept.
void forget_derived_defaults(v1::JobSpec& spec, std::string_view changed_path);

}  // namespace fp8::jobspec
