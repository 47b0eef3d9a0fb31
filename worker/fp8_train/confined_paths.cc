#include "worker/fp8_train/confined_paths.h"

#include "common/fs/open_matches_beneath.h"

namespace fp8::train_cli {

absl::StatusOr<ConfinedJobPaths> ConfineJobPaths(v1::JobSpec& spec, const std::string& data_root,
                                                 const std::string& checkpoint_root) {
  ConfinedJobPaths out;
  if (!data_root.empty()) {
    if (fs_confined::IsGlobPattern(spec.data().path())) {
      absl::StatusOr<fs_confined::OpenMatches> shards =
          fs_confined::OpenMatchesBeneath(data_root, spec.data().path(), "data.path");
      if (!shards.ok()) return shards.status();
      out.data_shards = std::move(shards->files);
      for (const fs_confined::UniqueFd& f : out.data_shards) out.data_files.push_back(fs_confined::FdPath(f.get()));
    } else {
      absl::StatusOr<fs_confined::UniqueFd> data =
          fs_confined::OpenFileBeneath(data_root, spec.data().path(), "data.path");
      if (!data.ok()) return data.status();
      out.data = std::move(*data);
      spec.mutable_data()->set_path(fs_confined::FdPath(out.data.get()).string());
    }
    if (spec.data().has_val_path()) {
      absl::StatusOr<fs_confined::UniqueFd> val =
          fs_confined::OpenFileBeneath(data_root, spec.data().val_path(), "data.val_path");
      if (!val.ok()) return val.status();
      out.validation_data = std::move(*val);
      spec.mutable_data()->set_val_path(fs_confined::FdPath(out.validation_data.get()).string());
    }
  }
  if (!checkpoint_root.empty()) {
    absl::StatusOr<fs_confined::UniqueFd> dir =
        fs_confined::MakeDirsBeneath(checkpoint_root, spec.checkpoint().dir(), "checkpoint.dir");
    if (!dir.ok()) return dir.status();
    out.checkpoints = std::move(*dir);
    out.checkpoint_dir = spec.checkpoint().dir();
    out.checkpoint_alias = fs_confined::FdPath(out.checkpoints.get()).string();
    spec.mutable_checkpoint()->set_dir(out.checkpoint_alias);
  }
  return out;
}

}  // namespace fp8::train_cli
