// Paths in a job spec (data.path, data.val_path, data.tokenizer_model, model.init_from,
// checkpoint.dir) are relative to the job file's folder,
// so a job folder can be moved or shared as a whole. The file loader makes them absolute:
// the spec then means the same to every process it is handed to.
#pragma once

#include <filesystem>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// Rewrites each relative path field as `base_dir / path`, lexically normalised.
void make_paths_absolute(v1::JobSpec& spec, const std::filesystem::path& base_dir);

}  // namespace fp8::jobspec
