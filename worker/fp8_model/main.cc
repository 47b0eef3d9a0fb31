// fp8-model: a trained model out of its checkpoint, and text from it.
//
//   fp8-model export --checkpoint DIR --out DIR [--dtype fp32|bf16] [--config job.yaml]
//                    [--tokenizer-model M]   (a SentencePiece job's model, as tokenizer.model)
//       writes DIR with config.json and model.safetensors in Hugging Face's Llama layout
//       (worker/engine/hf/llama_export.h), from the newest committed checkpoint under
//       --checkpoint (or that step, given a step-N directory), of any world size.
//   fp8-model logits --checkpoint DIR --tokens 1,2,3 --out FILE [--config job.yaml]
//       writes the logits this project computes for those token ids (fp32, no fp8 casts)
//       to FILE as raw little-endian fp32, [tokens, vocab_size] row-major.
//
//   fp8-model generate (--checkpoint DIR | --hf DIR) (--prompt TEXT | --prompt-tokens 1,2,3)
//                      [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]
//                      [--device cpu|cuda|cuda:N]
//       continues the prompt with the model (hf/generate.h) in fp32 with a KV cache, on
//       the CPU or a GPU: the engine's kernels on that device (hf/device_decoder.h).
//       --prompt is byte-level text (a model trained with data.tokenizer bytes): its
//       bytes are the token ids, the continuation is printed after it as text, and the
//       end-of-text byte (0x03, which ends each document of a shard) or a token beyond the
//       bytes stops it. --prompt-tokens takes any model's ids and prints the new ids,
//       comma-separated.
//
// --config: the job file that trained the checkpoint, for checkpoints that do not record
// their model section (written before they did).
//
// Exit status: 0 done; 2 bad command line or input (no committed checkpoint, a damaged
// shard, an --out of export that exists and is not empty); 1 any other failure.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/jobspec/loader.h"
#include "worker/engine/checkpoint/file_io.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/hf/checkpoint_logits.h"
#include "worker/engine/hf/checkpoint_model.h"
#include "worker/engine/hf/device_decoder.h"
#include "worker/engine/hf/generate.h"
#include "worker/engine/hf/hf_model_reader.h"
#include "worker/engine/hf/llama_export.h"

namespace {

int fail(const absl::Status& s) {
  std::fprintf(stderr, "fp8-model: %s\n", std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<std::optional<fp8::v1::ModelSpec>> model_from(const std::string& config) {
  if (config.empty()) return std::optional<fp8::v1::ModelSpec>();
  absl::StatusOr<fp8::v1::JobSpec> spec = fp8::jobspec::load_job_spec_file(config, {});
  if (!spec.ok()) return absl::InvalidArgumentError(spec.status().message());
  return std::optional<fp8::v1::ModelSpec>(spec->model());
}

absl::StatusOr<std::vector<int32_t>> parse_tokens(const std::string& text, const char* flag) {
  std::vector<int32_t> out;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": '", piece, "' is not a token id"));
    }
    out.push_back(id);
  }
  return out;
}

int run_export(const std::string& checkpoint, const std::string& out, const std::string& dtype,
               const std::string& config, const std::string& tokenizer_model) {
  absl::StatusOr<std::optional<fp8::v1::ModelSpec>> model = model_from(config);
  if (!model.ok()) return fail(model.status());
  fp8::hf::ExportOptions options;
  options.checkpoint = checkpoint;
  options.out = out;
  options.dtype = dtype == "bf16" ? fp8::hf::SafetensorsDType::kBF16 : fp8::hf::SafetensorsDType::kF32;
  options.model = *model;
  options.tokenizer_model = tokenizer_model;
  absl::StatusOr<fp8::hf::ExportSummary> done = fp8::hf::export_llama(options);
  if (!done.ok()) return fail(done.status());
  std::printf("exported step %lld (%d rank%s) to %s: %lld tensors, %lld parameters, %s\n",
              static_cast<long long>(done->step), done->world_size, done->world_size == 1 ? "" : "s", out.c_str(),
              static_cast<long long>(done->tensors), static_cast<long long>(done->parameters), dtype.c_str());
  return 0;
}

int run_logits(const std::string& checkpoint, const std::string& tokens_text, const std::string& out,
               const std::string& config) {
  absl::StatusOr<std::optional<fp8::v1::ModelSpec>> model = model_from(config);
  if (!model.ok()) return fail(model.status());
  absl::StatusOr<std::vector<int32_t>> tokens = parse_tokens(tokens_text, "--tokens");
  if (!tokens.ok()) return fail(tokens.status());
  absl::StatusOr<fp8::hf::CheckpointModel> loaded = fp8::hf::read_checkpoint_model(checkpoint, *model);
  if (!loaded.ok()) return fail(loaded.status());
  absl::StatusOr<std::vector<float>> logits = fp8::hf::checkpoint_logits(*loaded, *tokens);
  if (!logits.ok()) return fail(logits.status());
  absl::StatusOr<fp8::checkpoint::OutputFile> file = fp8::checkpoint::OutputFile::create(out);
  absl::Status written = file.status();
  if (written.ok()) written = file->write(std::as_bytes(std::span(*logits)));
  if (written.ok()) written = file->close();
  if (!written.ok()) return fail(written);
  std::printf("logits of %zu tokens (step %lld) to %s: [%zu, %lld] fp32\n", tokens->size(),
              static_cast<long long>(loaded->step), out.c_str(), tokens->size(),
              static_cast<long long>(loaded->config.vocab_size));
  return 0;
}

// "cuda" is GPU 0, "cuda:N" GPU N.
absl::StatusOr<int> cuda_ordinal(const std::string& device) {
  if (device == "cuda") return 0;
  int ordinal = -1;
  if (absl::StartsWith(device, "cuda:") && absl::SimpleAtoi(device.substr(5), &ordinal) && ordinal >= 0) return ordinal;
  return absl::InvalidArgumentError(absl::StrCat("--device ", device, ": expected cpu, cuda or cuda:N"));
}

struct GenerateArgs {
  std::string checkpoint, hf, config, prompt, prompt_tokens;
  std::string device = "cpu";
  int64_t max_new_tokens = 64;
  fp8::hf::SamplingOptions sampling;
};

int run_generate(const GenerateArgs& a) {
  absl::StatusOr<int> ordinal = a.device == "cpu" ? -1 : cuda_ordinal(a.device);
  if (!ordinal.ok()) return fail(ordinal.status());
  absl::StatusOr<fp8::hf::CheckpointModel> loaded;
  if (!a.hf.empty()) {
    loaded = fp8::hf::read_hf_model(a.hf);
  } else {
    absl::StatusOr<std::optional<fp8::v1::ModelSpec>> model = model_from(a.config);
    if (!model.ok()) return fail(model.status());
    loaded = fp8::hf::read_checkpoint_model(a.checkpoint, *model);
  }
  if (!loaded.ok()) return fail(loaded.status());
  const bool text = !a.prompt.empty();
  std::vector<int32_t> prompt;
  if (text) {
    if (loaded->config.vocab_size < 256) {
      return fail(absl::InvalidArgumentError(absl::StrCat("--prompt: the model's vocabulary (", loaded->config.vocab_size,
                                                          ") does not hold the bytes; give --prompt-tokens")));
    }
    for (unsigned char byte : a.prompt) prompt.push_back(byte);
  } else {
    absl::StatusOr<std::vector<int32_t>> ids = parse_tokens(a.prompt_tokens, "--prompt-tokens");
    if (!ids.ok()) return fail(ids.status());
    prompt = *ids;
  }
  // Kept in this order: the decoder's weights and cache live on the device.
  std::unique_ptr<fp8::engine::Device> gpu;
  const fp8::engine::Device* device = &fp8::engine::Device::cpu();
  if (*ordinal >= 0) {
    absl::StatusOr<std::unique_ptr<fp8::engine::Device>> opened = fp8::engine::Device::cuda(*ordinal);
    if (!opened.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("--device ", a.device, ": ",
                                                                          opened.status().message())));
    gpu = std::move(*opened);
    device = gpu.get();
  }
  absl::StatusOr<std::unique_ptr<fp8::hf::DeviceDecoder>> decoder = fp8::hf::DeviceDecoder::create(*loaded, *device);
  if (!decoder.ok()) return fail(decoder.status());
  fp8::hf::Sampler sampler(a.sampling);
  const auto end_of_text = [&](int32_t t) {
    return text && (t == static_cast<int32_t>(fp8::engine::data::kBytesEndOfText) || t >= 256);
  };
  absl::StatusOr<fp8::hf::Generation> g = fp8::hf::generate(**decoder, prompt, a.max_new_tokens, sampler, end_of_text);
  if (!g.ok()) return fail(g.status());
  if (text) {
    std::string out = a.prompt;
    for (int32_t t : g->tokens) {
      if (!end_of_text(t)) out.push_back(static_cast<char>(t));
    }
    std::printf("%s\n", out.c_str());
  } else {
    std::printf("%s\n", absl::StrJoin(g->tokens, ",").c_str());
  }
  if (g->context_full) {
    std::fprintf(stderr, "fp8-model: stopped at the model's max_seq_len (%lld tokens)\n",
                 static_cast<long long>(loaded->config.max_seq_len));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8-model: a trained model out of its checkpoint"};
  app.require_subcommand(1);
  std::string checkpoint, out, dtype = "fp32", config, tokens, tokenizer_model;

  CLI::App* exp = app.add_subcommand("export", "write the model in Hugging Face's Llama layout");
  exp->add_option("--checkpoint", checkpoint, "checkpoint.dir of the job, or one step-N folder in it")->required();
  exp->add_option("--out", out, "the folder to create (config.json, model.safetensors)")->required();
  exp->add_option("--dtype", dtype, "element type of the tensors")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  exp->add_option("--config", config, "the job file, for checkpoints that do not record their model");
  exp->add_option("--tokenizer-model", tokenizer_model,
                  "the job's data.tokenizer_model (SentencePiece), written as tokenizer.model");

  CLI::App* lg = app.add_subcommand("logits", "write this project's logits for token ids (fp32, no fp8)");
  lg->add_option("--checkpoint", checkpoint, "checkpoint.dir of the job, or one step-N folder in it")->required();
  lg->add_option("--tokens", tokens, "comma-separated token ids, e.g. 72,101,108")->required();
  lg->add_option("--out", out, "the file to write: raw little-endian fp32, [tokens, vocab]")->required();
  lg->add_option("--config", config, "the job file, for checkpoints that do not record their model");
  GenerateArgs gen;
  CLI::App* ge = app.add_subcommand("generate", "continue a prompt with the model (fp32; on the CPU with a KV cache)");
  auto* from_checkpoint =
      ge->add_option("--checkpoint", gen.checkpoint, "checkpoint.dir of the job, or one step-N folder in it");
  auto* from_hf = ge->add_option("--hf", gen.hf, "a folder in Hugging Face's Llama layout (config.json, *.safetensors)");
  from_checkpoint->excludes(from_hf);
  ge->add_option("--config", gen.config, "the job file, for checkpoints that do not record their model")
      ->excludes(from_hf);
  auto* prompt = ge->add_option("--prompt", gen.prompt, "byte-level text to continue");
  auto* prompt_tokens = ge->add_option("--prompt-tokens", gen.prompt_tokens, "comma-separated token ids to continue");
  prompt->excludes(prompt_tokens);
  ge->add_option("--max-new-tokens", gen.max_new_tokens, "tokens to add at most")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  ge->add_option("--temperature", gen.sampling.temperature, "0: always the most likely token")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  ge->add_option("--top-k", gen.sampling.top_k, "draw among the k most likely tokens; 0: all")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  ge->add_option("--seed", gen.sampling.seed, "the draws' seed")->capture_default_str();
  ge->add_option("--device", gen.device,
                 "where the model and its KV cache live: cpu, or a GPU (cuda, cuda:N)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    if (ge->parsed() && gen.checkpoint.empty() == gen.hf.empty()) {
      throw CLI::ValidationError("generate", "give --checkpoint DIR or --hf DIR");
    }
    if (ge->parsed() && gen.prompt.empty() == gen.prompt_tokens.empty()) {
      throw CLI::ValidationError("generate", "give --prompt TEXT or --prompt-tokens IDS");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (exp->parsed()) return run_export(checkpoint, out, dtype, config, tokenizer_model);
  if (ge->parsed()) return run_generate(gen);
  return run_logits(checkpoint, tokens, out, config);
}
