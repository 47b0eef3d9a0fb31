#include "worker/engine/hf/hf_model_source.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/hf/rope_permutation.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

namespace {

using nlohmann::json;

absl::Status bad(const std::filesystem::path& file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", what));
}

absl::StatusOr<json> read_json(const std::filesystem::path& path, bool follow_links) {
  absl::StatusOr<checkpoint::InputFile> file = checkpoint::InputFile::open(path, follow_links);
  if (!file.ok()) return absl::InvalidArgumentError(file.status().message());
  constexpr uint64_t kMaxJsonBytes = 64 << 20;
  if (file->size() > kMaxJsonBytes) return bad(path, absl::StrCat(file->size(), " bytes is too large for a JSON file"));
  std::string text(file->size(), '\0');
  if (absl::Status s = file->read_at(0, std::as_writable_bytes(std::span(text))); !s.ok()) return bad(path, s.message());
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
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
  if (!it->is_number() || !(it->get<double>() > 0)) {
    return bad(file, absl::StrCat(key, ": ", it->dump(), " is not positive"));
  }
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
    if (const auto it = j.find(key); it != j.end() && *it != false) {
      return bad(file, absl::StrCat(key, " must be false"));
    }
  }
  if (const auto it = j.find("hidden_act"); it != j.end() && *it != "silu") {
    return bad(file, absl::StrCat("hidden_act ", it->dump(), " is not silu"));
  }
  return absl::OkStatus();
}

// Tensor name -> the file holding it: one model.safetensors, or an index's weight_map. A
// file opened to list its tensors is kept in `opened`, so that it is not read again.
absl::StatusOr<std::map<std::string, std::filesystem::path>> tensor_files(
    const std::filesystem::path& dir, bool follow_links, std::vector<std::unique_ptr<SafetensorsReader>>& opened) {
  std::map<std::string, std::filesystem::path> out;
  const std::filesystem::path single = dir / "model.safetensors";
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) {
    absl::StatusOr<SafetensorsReader> r = SafetensorsReader::open(single, follow_links);
    if (!r.ok()) return absl::InvalidArgumentError(r.status().message());
    for (const SafetensorsTensorInfo& t : r->tensors()) out[t.name] = single;
    opened.push_back(std::make_unique<SafetensorsReader>(std::move(*r)));
    return out;
  }
  if (!std::filesystem::exists(index, ec)) {
    return bad(dir, "has neither model.safetensors nor model.safetensors.index.json");
  }
  FP8_ASSIGN_OR_RETURN(json j, read_json(index, follow_links));
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

absl::StatusOr<v1::ModelSpec> model_spec_from_hf_config(const std::filesystem::path& file, bool follow_links) {
  FP8_ASSIGN_OR_RETURN(json j, read_json(file, follow_links));
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

absl::StatusOr<HfModelSource> HfModelSource::open(const std::filesystem::path& dir, bool follow_links) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return bad(dir, "no such directory");
  HfModelSource out;
  out.dir_ = dir;
  FP8_ASSIGN_OR_RETURN(out.spec_, model_spec_from_hf_config(dir / "config.json", follow_links));
  absl::StatusOr<engine::LlamaConfig> config = engine::llama_config_from_spec(out.spec_);
  if (!config.ok()) return bad(dir / "config.json", config.status().message());
  out.config_ = *config;
  const engine::LlamaConfig& c = out.config_;

  FP8_ASSIGN_OR_RETURN(const auto files, tensor_files(dir, follow_links, out.files_));
  std::map<std::filesystem::path, const SafetensorsReader*> opened;
  for (const auto& reader : out.files_) opened[reader->path()] = reader.get();
  for (const ParameterShape& p : llama_parameter_shapes(c)) {
    const std::string name = hf_tensor_name(p.name);
    const auto file = files.find(name);
    if (file == files.end()) return bad(dir, absl::StrCat("has no tensor ", name, " (", p.name, ")"));
    const SafetensorsReader*& reader = opened[file->second];
    if (reader == nullptr) {
      absl::StatusOr<SafetensorsReader> r = SafetensorsReader::open(file->second, follow_links);
      if (!r.ok()) return absl::InvalidArgumentError(r.status().message());
      out.files_.push_back(std::make_unique<SafetensorsReader>(std::move(*r)));
      reader = out.files_.back().get();
    }
    const SafetensorsTensorInfo* info = reader->find(name);
    if (info == nullptr) return bad(file->second, absl::StrCat("has no tensor ", name, " (the index says it does)"));
    if (info->shape != p.shape) {
      return bad(file->second, absl::StrCat(name, " is shaped [", absl::StrJoin(info->shape, ", "),
                                            "]; config.json's model needs [", absl::StrJoin(p.shape, ", "), "]"));
    }
    out.tensors_[name] = reader;
  }
  for (const auto& [name, file] : files) {
    // Older exports store RoPE's frequencies; a tied model may store its lm_head anyway.
    if (out.tensors_.count(name) || name.ends_with(".rotary_emb.inv_freq") ||
        (c.tie_embeddings && name == "lm_head.weight")) {
      continue;
    }
    return bad(file, absl::StrCat("tensor ", name, " has no place in a Llama of config.json's shape"));
  }
  return out;
}

absl::StatusOr<std::vector<float>> HfModelSource::read_rows(const ParameterShape& p, int64_t begin, int64_t end) const {
  const std::string name = hf_tensor_name(p.name);
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::InvalidArgumentError(absl::StrCat(dir_.string(), ": no parameter ", p.name));
  const SafetensorsReader& reader = *it->second;
  auto read = [&](int64_t b, int64_t e) -> absl::StatusOr<std::vector<float>> {
    absl::StatusOr<std::vector<float>> rows = reader.read_f32_rows(name, b, e);
    if (!rows.ok()) return absl::InvalidArgumentError(rows.status().message());
    return rows;
  };
  if (!is_rope_projection(p.name)) return read(begin, end);
  // RoPE's reordering stays within a head: read the whole heads the rows lie in.
  const int64_t head_dim = config_.head_dim();
  const int64_t cols = p.shape[1];
  const int64_t first = begin / head_dim * head_dim;
  const int64_t last = (end + head_dim - 1) / head_dim * head_dim;
  FP8_ASSIGN_OR_RETURN(std::vector<float> heads, read(first, last));
  heads = half_to_interleaved_rows(heads, (last - first) / head_dim, head_dim, cols);
  return std::vector<float>(heads.begin() + (begin - first) * cols, heads.begin() + (end - first) * cols);
}

}  // namespace fp8::hf
