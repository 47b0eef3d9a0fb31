#include "worker/engine/hf/hf_model_reader.h"

#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "worker/engine/hf/llama_names.h"
#include "worker/engine/hf/rope_permutation.h"
#include "worker/engine/hf/safetensors_reader.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

namespace {

using nlohmann::json;

absl::Status bad(const std::filesystem::path& file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", what));
}

absl::StatusOr<json> read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad(path, "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad(path, "is not a JSON object");
  return j;
}

// A positive integer field; `fallback` when absent and one is given.
absl::StatusOr<int64_t> positive_int(const json& j, const std::filesystem::path& file, const char* key,
                                     std::optional<int64_t> fallback = std::nullopt) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    return bad(file, absl::StrCat("has no ", key));
  }
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > INT32_MAX) {
    return bad(file, absl::StrCat(key, ": ", it->dump(), " is not a positive 32-bit integer"));
  }
  return it->get<int64_t>();
}

absl::StatusOr<double> positive_number(const json& j, const std::filesystem::path& file, const char* key,
                                       double fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() > 0)) return bad(file, absl::StrCat(key, ": ", it->dump(), " is not positive"));
  return it->get<double>();
}

// Keys whose presence with anything but their neutral value changes the function.
absl::Status refuse_unsupported(const json& j, const std::filesystem::path& file) {
  if (const auto it = j.find("model_type"); it != j.end() && *it != "llama") {
    return bad(file, absl::StrCat("model_type ", it->dump(), " is not llama"));
  }
  if (const auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    return bad(file, "rope_scaling is set; only plain RoPE (rope_scaling null) is supported");
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (const auto it = j.find(key); it != j.end() && *it != false) return bad(file, absl::StrCat(key, " must be false"));
  }
  if (const auto it = j.find("hidden_act"); it != j.end() && *it != "silu") {
    return bad(file, absl::StrCat("hidden_act ", it->dump(), " is not silu"));
  }
  return absl::OkStatus();
}

// Tensor name -> the file holding it: one model.safetensors, or an index's weight_map.
absl::StatusOr<std::map<std::string, std::filesystem::path>> tensor_files(const std::filesystem::path& dir) {
  std::map<std::string, std::filesystem::path> out;
  const std::filesystem::path single = dir / "model.safetensors";
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) {
    FP8_ASSIGN_OR_RETURN(SafetensorsReader r, SafetensorsReader::Open(single));
    for (const SafetensorsTensorInfo& t : r.tensors()) out[t.name] = single;
    return out;
  }
  if (!std::filesystem::exists(index, ec)) return bad(dir, "has neither model.safetensors nor model.safetensors.index.json");
  FP8_ASSIGN_OR_RETURN(json j, read_json(index));
  const auto map = j.find("weight_map");
  if (map == j.end() || !map->is_object()) return bad(index, "has no weight_map object");
  for (const auto& [name, file] : map->items()) {
    // A shard lies in the folder itself: a plain file name.
    if (!file.is_string() || file.get<std::string>().empty() ||
        std::filesystem::path(file.get<std::string>()).filename() != file.get<std::string>()) {
      return bad(index, absl::StrCat("weight_map[\"", name, "\"]: ", file.dump(), " is not a file name in the folder"));
    }
    out[name] = dir / file.get<std::string>();
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::ModelSpec> model_spec_from_hf_config(const std::filesystem::path& file) {
  FP8_ASSIGN_OR_RETURN(json j, read_json(file));
  FP8_RETURN_IF_ERROR(refuse_unsupported(j, file));
  v1::ModelSpec spec;
  spec.set_architecture(v1::ModelSpec::LLAMA);
  FP8_ASSIGN_OR_RETURN(const int64_t dim, positive_int(j, file, "hidden_size"));
  FP8_ASSIGN_OR_RETURN(const int64_t heads, positive_int(j, file, "num_attention_heads"));
  FP8_ASSIGN_OR_RETURN(const int64_t kv_heads, positive_int(j, file, "num_key_value_heads", heads));
  FP8_ASSIGN_OR_RETURN(const int64_t head_dim, positive_int(j, file, "head_dim", dim / heads));
  if (dim % heads != 0 || head_dim != dim / heads) {
    return bad(file, absl::StrCat("head_dim ", head_dim, " is not hidden_size / num_attention_heads (", dim, " / ",
                                  heads, "); this project's Llama needs it to be"));
  }
  FP8_ASSIGN_OR_RETURN(const int64_t layers, positive_int(j, file, "num_hidden_layers"));
  FP8_ASSIGN_OR_RETURN(const int64_t ffn, positive_int(j, file, "intermediate_size"));
  FP8_ASSIGN_OR_RETURN(const int64_t vocab, positive_int(j, file, "vocab_size"));
  FP8_ASSIGN_OR_RETURN(const int64_t seq, positive_int(j, file, "max_position_embeddings"));
  // Hugging Face's LlamaConfig defaults.
  FP8_ASSIGN_OR_RETURN(const double theta, positive_number(j, file, "rope_theta", 10000.0));
  FP8_ASSIGN_OR_RETURN(const double eps, positive_number(j, file, "rms_norm_eps", 1e-6));
  bool tied = false;
  if (const auto it = j.find("tie_word_embeddings"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad(file, "tie_word_embeddings is not true or false");
    tied = it->get<bool>();
  }
  spec.set_dim(static_cast<int32_t>(dim));
  spec.set_n_heads(static_cast<int32_t>(heads));
  spec.set_n_kv_heads(static_cast<int32_t>(kv_heads));
  spec.set_n_layers(static_cast<int32_t>(layers));
  spec.set_ffn_dim(static_cast<int32_t>(ffn));
  spec.set_vocab_size(static_cast<int32_t>(vocab));
  spec.set_max_seq_len(static_cast<int32_t>(seq));
  spec.set_rope_theta(theta);
  spec.set_norm_eps(eps);
  spec.set_tie_embeddings(tied);
  return spec;
}

absl::StatusOr<CheckpointModel> read_hf_model(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return bad(dir, "no such directory");
  CheckpointModel out;
  out.step_dir = dir;
  FP8_ASSIGN_OR_RETURN(out.spec, model_spec_from_hf_config(dir / "config.json"));
  absl::StatusOr<engine::LlamaConfig> config = engine::llama_config_from_spec(out.spec);
  if (!config.ok()) return bad(dir / "config.json", config.status().message());
  out.config = *config;
  const engine::LlamaConfig& c = out.config;

  FP8_ASSIGN_OR_RETURN(const auto files, tensor_files(dir));
  std::map<std::filesystem::path, std::unique_ptr<SafetensorsReader>> readers;
  std::set<std::string> used;
  for (const ParameterShape& p : llama_parameter_shapes(c)) {
    const std::string name = hf_tensor_name(p.name);
    const auto file = files.find(name);
    if (file == files.end()) return bad(dir, absl::StrCat("has no tensor ", name, " (", p.name, ")"));
    std::unique_ptr<SafetensorsReader>& reader = readers[file->second];
    if (!reader) {
      absl::StatusOr<SafetensorsReader> opened = SafetensorsReader::Open(file->second);
      if (!opened.ok()) return absl::InvalidArgumentError(opened.status().message());
      reader = std::make_unique<SafetensorsReader>(std::move(*opened));
    }
    const SafetensorsTensorInfo* info = reader->Find(name);
    if (info == nullptr) return bad(file->second, absl::StrCat("has no tensor ", name, " (the index says it does)"));
    if (info->shape != p.shape) {
      return bad(file->second, absl::StrCat(name, " is shaped [", absl::StrJoin(info->shape, ", "), "]; config.json's model needs [",
                                            absl::StrJoin(p.shape, ", "), "]"));
    }
    absl::StatusOr<std::vector<float>> values = reader->ReadF32(name);
    if (!values.ok()) return absl::InvalidArgumentError(values.status().message());
    NamedTensor t{p.name, p.shape, std::move(*values)};
    if (is_rope_projection(p.name)) {
      t.values = half_to_interleaved_rows(t.values, p.shape[0] / c.head_dim(), c.head_dim(), p.shape[1]);
    }
    out.parameters.push_back(std::move(t));
    used.insert(name);
  }
  for (const auto& [name, file] : files) {
    // Older exports store RoPE's frequencies; a tied model may store its lm_head anyway.
    if (used.count(name) || name.ends_with(".rotary_emb.inv_freq") || (c.tie_embeddings && name == "lm_head.weight")) {
      continue;
    }
    return bad(file, absl::StrCat("tensor ", name, " has no place in a Llama of config.json's shape"));
  }
  return out;
}

}  // namespace fp8::hf
