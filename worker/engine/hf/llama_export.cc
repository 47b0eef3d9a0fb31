#include "worker/engine/hf/llama_export.h"

#include <deque>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/sentencepiece_model_info.h"
#include "fp8/arith.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/hf_config.h"
#include "worker/engine/hf/llama_names.h"
#include "worker/engine/hf/rope_permutation.h"
#include "worker/engine/hf/safetensors_writer.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

namespace {

absl::Status check_out(const std::filesystem::path& out) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(out, ec);
  if (!std::filesystem::exists(st)) return absl::OkStatus();
  if (std::filesystem::is_directory(st) && std::filesystem::is_empty(out, ec) && !ec) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(out.string(), ": exists and is not an empty directory"));
}

absl::Status write_text(const std::filesystem::path& path, const std::string& text) {
  FP8_ASSIGN_OR_RETURN(checkpoint::OutputFile file, checkpoint::OutputFile::create(path));
  FP8_RETURN_IF_ERROR(file.write(std::as_bytes(std::span(text))));
  FP8_RETURN_IF_ERROR(file.sync());
  return file.close();
}

// Writes config.json and model.safetensors into `dir`.
absl::Status write_folder(const std::filesystem::path& dir, CheckpointModel& m, SafetensorsDType dtype,
                          ExportSummary& summary) {
  const engine::LlamaConfig& c = m.config;
  std::deque<std::vector<uint16_t>> bf16;  // storage the tensors' byte spans point into
  std::vector<SafetensorsTensor> tensors;
  auto bytes_of = [&](const NamedTensor& t) -> std::span<const std::byte> {
    if (dtype == SafetensorsDType::kF32) return std::as_bytes(std::span(t.values));
    std::vector<uint16_t>& h = bf16.emplace_back(t.values.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = float_to_bf16(t.values[i]);
    return std::as_bytes(std::span(h));
  };
  for (NamedTensor& t : m.parameters) {
    if (is_rope_projection(t.name)) {
      const int64_t heads = t.shape[0] / c.head_dim();
      t.values = interleaved_to_half_rows(t.values, heads, c.head_dim(), t.shape[1]);
    }
    tensors.push_back({hf_tensor_name(t.name), dtype, t.shape, bytes_of(t)});
    summary.parameters += static_cast<int64_t>(t.values.size());
  }
  // A tied output projection is the embedding table, written again as lm_head.
  if (c.tie_embeddings) {
    const NamedTensor& e = *m.find("tok_embeddings");
    tensors.push_back({hf_tensor_name("output"), dtype, e.shape, tensors.front().bytes});
  }
  summary.tensors = static_cast<int64_t>(tensors.size());
  FP8_RETURN_IF_ERROR(write_text(dir / "config.json", hf_llama_config_json(m.spec, c, dtype)));
  FP8_RETURN_IF_ERROR(write_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}}));
  return checkpoint::sync_directory(dir);
}

}  // namespace

// The tokenizer model's bytes, checked against the exported model's vocabulary.
absl::StatusOr<std::string> read_tokenizer_model(const std::filesystem::path& path, int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--tokenizer-model ", path.string(), ": cannot open"));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::string error;
  const std::optional<tokenizer::SentencePieceModelInfo> info = tokenizer::read_sentence_piece_model_info(bytes.str(), &error);
  if (!info) return absl::InvalidArgumentError(absl::StrCat("--tokenizer-model ", path.string(), ": ", error));
  if (info->pieces != vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer-model ", path.string(), " has ", info->pieces,
                                                   " pieces, but the checkpoint's vocabulary is ", vocab_size));
  }
  return bytes.str();
}

absl::StatusOr<ExportSummary> export_llama(const ExportOptions& options) {
  std::filesystem::path out = options.out;
  if (!out.has_filename()) out = out.parent_path();  // "dir/"
  if (out.empty()) return absl::InvalidArgumentError("export: no output directory given");
  FP8_RETURN_IF_ERROR(check_out(out));
  FP8_ASSIGN_OR_RETURN(CheckpointModel model, read_checkpoint_model(options.checkpoint, options.model));
  std::string tokenizer_bytes;
  if (!options.tokenizer_model.empty()) {
    FP8_ASSIGN_OR_RETURN(tokenizer_bytes, read_tokenizer_model(options.tokenizer_model, model.config.vocab_size));
  }
  ExportSummary summary;
  summary.step_dir = model.step_dir;
  summary.step = model.step;
  summary.world_size = model.world_size;

  const std::filesystem::path parent = out.has_parent_path() ? out.parent_path() : std::filesystem::path(".");
  const std::filesystem::path tmp = parent / absl::StrCat(".", out.filename().string(), std::string(checkpoint::kTempSuffix));
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  std::filesystem::remove_all(tmp, ec);  // left by an export that died
  if (!std::filesystem::create_directory(tmp, ec) || ec) {
    return absl::InvalidArgumentError(absl::StrCat(tmp.string(), ": cannot create: ", ec.message()));
  }
  absl::Status written = write_folder(tmp, model, options.dtype, summary);
  if (written.ok() && !tokenizer_bytes.empty()) written = write_text(tmp / "tokenizer.model", tokenizer_bytes);
  // rename(2) replaces an empty directory; the check above allowed only that.
  if (written.ok()) written = checkpoint::rename_durably(tmp, out);
  if (!written.ok()) {
    std::filesystem::remove_all(tmp, ec);
    return written;
  }
  return summary;
}

}  // namespace fp8::hf
