#include "worker/fp8_train/confined_paths.h"


#include "common/fs/open_matches_beneath.h"

namespace fp8::train_cli {

absl::StatusOr<ConfinedJobPaths> confine_job_paths(v1::JobSpec& spec, const std::string& data_root,
                                                 const std::string& checkpoint_root) {
  ConfinedJobPaths out;
  if (!data_root.empty()) {
    if (fs_confined::is_glob_pattern(spec.data().path())) {
      absl::StatusOr<fs_confined::OpenMatches> shards =
          fs_confined::open_matches_beneath(data_root, spec.data().path(), "data.path");
      if (!shards.ok()) return shards.status();
      out.data_shards = std::move(shards->files);
      for (const fs_confined::UniqueFd& f : out.data_shards) out.data_files.push_back(fs_confined::fd_path(f.get()));
    } else {
      absl::StatusOr<fs_confined::UniqueFd> data =
          fs_confined::open_file_beneath(data_root, spec.data().path(), "data.path");
      if (!data.ok()) return data.status();
      out.data = std::move(*data);
      spec.mutable_data()->set_path(fs_confined::fd_path(out.data.get()).string());
    }
    v1::DataSpec& d = *spec.mutable_data();
    // Opened beneath the root; the spec then names what was opened. (mutable_* would mark
    // an absent field present: each is reached only when it is.)
    auto confine = [&](const std::string& path, const char* field) -> absl::StatusOr<std::string> {
      absl::StatusOr<fs_confined::UniqueFd> file = fs_confined::open_file_beneath(data_root, path, field);
      if (!file.ok()) return file.status();
      const std::string alias = fs_confined::fd_path(file->get()).string();
      out.data_files_held.push_back(std::move(*file));
      return alias;
    };
    if (d.has_val_path()) {
      absl::StatusOr<std::string> alias = confine(d.val_path(), "data.val_path");
      if (!alias.ok()) return alias.status();
      d.set_val_path(*alias);
    }
    if (d.has_tokenizer_model()) {
      absl::StatusOr<std::string> alias = confine(d.tokenizer_model(), "data.tokenizer_model");
      if (!alias.ok()) return alias.status();
      d.set_tokenizer_model(*alias);
    }
    if (spec.model().has_init_from()) {
      // A folder: its files are then opened without following links (init_from.h).
      absl::StatusOr<fs_confined::UniqueFd> dir =
          fs_confined::open_dir_beneath(data_root, spec.model().init_from(), "model.init_from");
      if (!dir.ok()) return dir.status();
      spec.mutable_model()->set_init_from(fs_confined::fd_path(dir->get()).string());
      out.data_files_held.push_back(std::move(*dir));
      out.init_from_confined = true;
    }
  }
  if (!checkpoint_root.empty()) {
    absl::StatusOr<fs_confined::UniqueFd> dir =
        fs_confined::make_dirs_beneath(checkpoint_root, spec.checkpoint().dir(), "checkpoint.dir");
    if (!dir.ok()) return dir.status();
    out.checkpoints = std::move(*dir);
    out.checkpoint_dir = spec.checkpoint().dir();
    out.checkpoint_alias = fs_confined::fd_path(out.checkpoints.get()).string();
    spec.mutable_checkpoint()->set_dir(out.checkpoint_alias);
  }
  return out;
}

}  // namespace fp8::train_cli
