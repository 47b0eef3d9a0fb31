#include "worker/engine/train/init_from.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/engine/fsdp/shard_layout.h"
#include "worker/engine/hf/hf_model_source.h"
#include "worker/engine/model/llama_config.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine {

namespace {

absl::Status bad(const InitFromOptions& o, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("model.init_from: ", o.dir.string(), ": ", what));
}

// Each field of the job's model section that differs from the folder's config.json.
std::vector<std::string> differences(const v1::ModelSpec& job, const v1::ModelSpec& hf) {
  std::vector<std::string> out;
  auto compare = [&](const char* field, const char* key, auto ours, auto theirs) {
    if (ours != theirs) {
      out.push_back(absl::StrCat("model.", field, " is ", ours, ", config.json's ", key, " ", theirs));
    }
  };
  compare("dim", "hidden_size", job.dim(), hf.dim());
  compare("n_layers", "num_hidden_layers", job.n_layers(), hf.n_layers());
  compare("n_heads", "num_attention_heads", job.n_heads(), hf.n_heads());
  compare("n_kv_heads", "num_key_value_heads", job.n_kv_heads(), hf.n_kv_heads());
  compare("ffn_dim", "intermediate_size", job.ffn_dim(), hf.ffn_dim());
  compare("vocab_size", "vocab_size", job.vocab_size(), hf.vocab_size());
  compare("tie_embeddings", "tie_word_embeddings", job.tie_embeddings(), hf.tie_embeddings());
  compare("rope_theta", "rope_theta", job.rope_theta(), hf.rope_theta());
  compare("norm_eps", "rms_norm_eps", job.norm_eps(), hf.norm_eps());
  return out;
}

}  // namespace

absl::Status init_from_hf(const v1::ModelSpec& model, const InitFromOptions& o, ParameterSet& trained) {
  absl::StatusOr<hf::HfModelSource> source = hf::HfModelSource::open(o.dir, o.follow_links);
  if (!source.ok()) return absl::InvalidArgumentError(absl::StrCat("model.init_from: ", source.status().message()));
  if (std::vector<std::string> diff = differences(model, source->spec()); !diff.empty()) {
    return bad(o, absl::StrCat("holds another model: ", absl::StrJoin(diff, "; ")));
  }
  for (const hf::ParameterShape& p : hf::llama_parameter_shapes(source->config())) {
    auto it =
        std::find_if(trained.all().begin(), trained.all().end(), [&](const Parameter& t) { return t.name == p.name; });
    if (it == trained.all().end()) return bad(o, absl::StrCat("the job's model has no parameter ", p.name));
    // Under tensor parallelism the parameter (or FSDP's shard of it) is part of the whole
    // tensor: its rows or its columns (Parameter::split). The part is cut from the folder's
    // tensor as one process's tensor is cut (initial_values), so the ranks start from the
    // model one process starts from.
    const ParameterSplit& split = it->split;
    std::vector<int64_t> part = p.engine_shape();
    int64_t real_rows = p.shape[0];  // rows past these (the vocabulary's padding) are zero
    int64_t first_row = 0;
    int64_t first_col = 0;
    if (split.split()) {
      // Split tensors are the blocks' matrices, which have no padding rows.
      const bool divides =
          part.size() == 2 && split.axis <= 1 && part[static_cast<size_t>(split.axis)] % split.parts == 0;
      if (!divides || part[0] != p.shape[0]) {
        return bad(o, absl::StrCat(p.name, ": cannot take part ", split.index, " of ", split.parts, " along axis ",
                                   split.axis, " of [", absl::StrJoin(p.shape, ", "), "]"));
      }
      part[static_cast<size_t>(split.axis)] /= split.parts;
      if (split.axis == 0) {
        real_rows = part[0];
        first_row = split.index * part[0];
      } else {
        first_col = split.index * part[1];
      }
    }
    // This rank's rows of the part, whose rows past the folder's (the vocabulary's padding,
    // FSDP's) are zero. wq and wk's parts are whole heads (the ranks split the heads), and
    // read_rows reorders RoPE's rows within each head, so a part read alone is the part of
    // the tensor read whole.
    const fsdp::ShardLayout layout = fsdp::shard_layout(part, o.world_size);
    const int64_t begin = static_cast<int64_t>(o.rank) * layout.rows_per_rank;
    const int64_t end = begin + layout.real_rows_of(o.rank);
    const int64_t read_begin = std::min(begin, real_rows), read_end = std::min(end, real_rows);
    std::vector<float> values;
    FP8_ASSIGN_OR_RETURN(values, source->read_rows(p, first_row + read_begin, first_row + read_end));
    if (split.split() && split.axis == 1) {
      // A row-parallel weight's columns: whole rows are read (the file holds them
      // contiguous), of which each keeps this rank's columns.
      const int64_t cols = p.shape[1], part_cols = part[1];
      std::vector<float> columns(static_cast<size_t>((read_end - read_begin) * part_cols));
      for (int64_t r = 0; r < read_end - read_begin; ++r) {
        std::copy_n(values.begin() + r * cols + first_col, part_cols, columns.begin() + r * part_cols);
      }
      values = std::move(columns);
    }
    values.resize(static_cast<size_t>(layout.shard_elements()), 0.0f);
    if (absl::Status s = it->value.upload<float>(values); !s.ok()) {
      return bad(o, absl::StrCat(p.name, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine
