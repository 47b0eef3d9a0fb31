#include "common/jobspec/paths.h"

#include <string>

namespace fp8::jobspec {
namespace {

void make_absolute(std::string& path, const std::filesystem::path& base_dir) {
  if (path.empty()) return;  // validation reports it
  std::filesystem::path p(path);
  if (p.is_absolute()) return;
  path = (base_dir / p).lexically_normal().string();
}

}  // namespace

void make_paths_absolute(v1::JobSpec& spec, const std::filesystem::path& base_dir) {
  // Every path field of job.proto; a new one must be added here.
  if (spec.data().has_path()) make_absolute(*spec.mutable_data()->mutable_path(), base_dir);
  if (spec.data().has_val_path()) make_absolute(*spec.mutable_data()->mutable_val_path(), base_dir);
  if (spec.data().has_tokenizer_model()) make_absolute(*spec.mutable_data()->mutable_tokenizer_model(), base_dir);
  if (spec.model().has_init_from()) make_absolute(*spec.mutable_model()->mutable_init_from(), base_dir);
  if (spec.checkpoint().has_dir()) make_absolute(*spec.mutable_checkpoint()->mutable_dir(), base_dir);
}

}  // namespace fp8::jobspec
