// fp8-train under the coordinator: the job's corpus and checkpoint folder, opened beneath
// the roots the coordinator admitted them under (StartRank.data_root/checkpoint_root,
// passed as --data-root/--checkpoint-root) without following symbolic links, and the spec
// pointed at what was opened (/proc/self/fd/N), so that a link swapped in later changes
// nothing the rank reads or writes.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/fs/open_beneath.h"
#include "fp8/v1/job.pb.h"

namespace fp8::train_cli {

struct ConfinedJobPaths {
  fs_confined::UniqueFd data;         // the corpus; held open for the whole run
  // A pattern's matches instead (data.path names token shards by a glob), held open too,
  // and the paths that stand for them (TrainerOptions::data_files).
  std::vector<fs_confined::UniqueFd> data_shards;
  std::vector<std::string> data_files;
  // data.val_path and data.tokenizer_model, when the job has them, and model.init_from.
  std::vector<fs_confined::UniqueFd> data_files_held;
  // model.init_from now names the folder opened beneath the data root.
  bool init_from_confined = false;
  fs_confined::UniqueFd checkpoints;  // the checkpoint folder; held open for the whole run
  // What the spec named, and the path that now stands for it ("" when not confined):
  // messages and reports show the first.
  std::string checkpoint_dir;
  std::string checkpoint_alias;
};

// An empty root leaves that path as it is (a coordinator that sends none).
absl::StatusOr<ConfinedJobPaths> confine_job_paths(v1::JobSpec& spec, const std::string& data_root,
                                                 const std::string& checkpoint_root);

}  // namespace fp8::train_cli
