// A model in Hugging Face's Llama layout opened for reading in this project's terms:
// config.json (LlamaForCausalLM) as a model section, and each parameter's rows from
// model.safetensors, or from the shards model.safetensors.index.json lists. Tensors are
// renamed (llama_names.h), widened to fp32 (bf16 exactly), and wq/wk's rows reordered from
// rotate-half to this project's adjacent pairs (rope_permutation.h), so the model computes
// what the folder's model computes in Hugging Face's convention.
//
// Open refuses what this project's Llama cannot compute, naming the file and the key or
// tensor: rope_scaling, biases, an activation other than silu, a head_dim other than
// hidden_size / num_attention_heads, a tensor missing or shaped otherwise, or one the model
// has no place for. Reading rows reads only their bytes: an FSDP rank reads its share.
//
//   HfModelSource m = *HfModelSource::open("my-model/");
//   for (const ParameterShape& p : llama_parameter_shapes(m.config()))
//     std::vector<float> rows = *m.read_rows(p, begin, end);
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "fp8/v1/job.pb.h"
#include "worker/engine/hf/llama_names.h"
#include "worker/engine/hf/safetensors_reader.h"
#include "worker/engine/model/llama_config.h"

namespace fp8::hf {

class HfModelSource {
 public:
  // follow_links false: a symbolic link as any file of the folder is refused (a folder
  // opened beneath a root must not lead out of it). InvalidArgument for every refusal.
  static absl::StatusOr<HfModelSource> open(const std::filesystem::path& dir, bool follow_links = true);

  const std::filesystem::path& dir() const { return dir_; }
  const v1::ModelSpec& spec() const { return spec_; }
  const engine::LlamaConfig& config() const { return config_; }
  // Rows [begin, end) of parameter `p` (one of llama_parameter_shapes(config())), row-major
  // fp32 in this project's row order.
  absl::StatusOr<std::vector<float>> read_rows(const ParameterShape& p, int64_t begin, int64_t end) const;

 private:
  std::filesystem::path dir_;
  v1::ModelSpec spec_;
  engine::LlamaConfig config_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, const SafetensorsReader*> tensors_;  // Hugging Face name -> its file
};

// The model section a config.json describes (sizes, rope_theta, rms_norm_eps, tying).
absl::StatusOr<v1::ModelSpec> model_spec_from_hf_config(const std::filesystem::path& config_json,
                                                        bool follow_links = true);

}  // namespace fp8::hf
