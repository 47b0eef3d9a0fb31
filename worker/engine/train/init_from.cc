#include "worker/engine/train/init_from.h"

#include <algorithm>
#include <string>
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
    // This rank's rows of the engine's tensor, whose rows past the folder's (the
    // vocabulary's padding, FSDP's) are zero.
    const fsdp::ShardLayout layout = fsdp::shard_layout(p.engine_shape(), o.world_size);
    const int64_t begin = static_cast<int64_t>(o.rank) * layout.rows_per_rank;
    const int64_t end = begin + layout.real_rows_of(o.rank);
    std::vector<float> values;
    FP8_ASSIGN_OR_RETURN(values, source->read_rows(p, std::min(begin, p.shape[0]), std::min(end, p.shape[0])));
    values.resize(static_cast<size_t>(layout.shard_elements()), 0.0f);
    if (absl::Status s = it->value.upload<float>(values); !s.ok()) {
      return bad(o, absl::StrCat(p.name, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine
