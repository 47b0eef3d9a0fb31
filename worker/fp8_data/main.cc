// fp8-data: the job's data, made ready before training.
//
//   fp8-data train-tokenizer --out PREFIX --vocab-size N [--model-type bpe|unigram] INPUT...
//       a SentencePiece model of the inputs' text: PREFIX.model and PREFIX.vocab.
//   fp8-data prepare --out DIR [--name NAME] [--shard-tokens N] [--tokenizer-model M] [--threads T] INPUT...
//       text files, glob patterns or JSON Lines (*.jsonl, a "text" field per line) into
//       token shards (the bytes tokenizer, or the SentencePiece model M),
//       DIR/NAME-00000.tokens, ...; prints a summary.
//   fp8-data inspect SHARD [--tokens N] [--tokenizer-model M]
//       a shard's header, its documents and its first N tokens decoded.
//   fp8-data encode [--tokenizer-model M] TEXT
//       TEXT's token ids, comma-separated (for `fp8-model generate --prompt-tokens`).
//   fp8-data decode [--tokenizer-model M] [IDS]
//       the text of comma-separated token ids (what `fp8-model generate` printed), from
//       standard input when IDS is not given.
//
// Exit status: 0 done, 2 bad command line or bad input (the message names the file and
// where in it), 1 other failures.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "worker/engine/data/tokenizer.h"
#include "worker/fp8_data/inspect.h"
#include "worker/fp8_data/prepare.h"
#include "worker/fp8_data/sentencepiece_tokenizer.h"
#include "worker/fp8_data/train_tokenizer.h"

namespace {

int exit_code_of(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
      return 2;
    default:
      return 1;
  }
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "fp8-data: %s\n", std::string(s.message()).c_str());
  return exit_code_of(s);
}

int run_prepare(const fp8::data_cli::PrepareOptions& options) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto progress = [tty](double share) {
    if (!tty) return;
    const int width = 40, filled = static_cast<int>(share * width);
    std::fprintf(stderr, "\r[%s%s] %3d%%", std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), ' ').c_str(), static_cast<int>(share * 100));
  };
  absl::StatusOr<fp8::data_cli::PrepareSummary> summary = fp8::data_cli::prepare(options, progress);
  if (tty) std::fprintf(stderr, "\n");
  if (!summary.ok()) return fail(summary.status());
  std::printf("%lld documents, %lld tokens (end-of-text ids included), %.3f bytes per token, %zu shard%s:\n",
              static_cast<long long>(summary->documents), static_cast<long long>(summary->tokens),
              summary->tokens > 0 ? static_cast<double>(summary->bytes) / static_cast<double>(summary->tokens) : 0.0,
              summary->shards.size(), summary->shards.size() == 1 ? "" : "s");
  for (const std::string& shard : summary->shards) std::printf("  %s\n", shard.c_str());
  return 0;
}

int run_encode(const std::string& model, const std::string& text) {
  absl::StatusOr<std::unique_ptr<fp8::engine::data::Tokenizer>> tokenizer = fp8::data_cli::load_tokenizer(model, "--tokenizer-model");
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::vector<uint32_t> ids;
  if (absl::Status s = (*tokenizer)->encode(text, ids); !s.ok()) return fail(s);
  std::printf("%s\n", absl::StrJoin(ids, ",").c_str());
  return 0;
}

int run_decode(const std::string& model, const std::string& text) {
  absl::StatusOr<std::unique_ptr<fp8::engine::data::Tokenizer>> tokenizer = fp8::data_cli::load_tokenizer(model, "--tokenizer-model");
  if (!tokenizer.ok()) return fail(tokenizer.status());
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(piece, &id) || id < 0 || static_cast<uint32_t>(id) >= (*tokenizer)->vocab_size()) {
      return fail(absl::InvalidArgumentError(absl::StrCat("decode: '", piece, "' is not a token id of ",
                                                          (*tokenizer)->name(), " (vocabulary ",
                                                          (*tokenizer)->vocab_size(), ")")));
    }
    ids.push_back(id);
  }
  std::printf("%s\n", (*tokenizer)->decode(ids).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8-data: text into token shards for fp8-train, what a shard holds, text to token ids and back"};
  app.require_subcommand(1);

  fp8::data_cli::PrepareOptions prepare;
  CLI::App* prepare_cmd = app.add_subcommand("prepare", "text files, patterns or JSON Lines into token shards");
  prepare_cmd->add_option("inputs", prepare.inputs, "files, glob patterns, or *.jsonl (a \"text\" field per line)")
      ->required();
  prepare_cmd->add_option("--out", prepare.out_dir, "folder for the shards (created if missing)")->required();
  prepare_cmd->add_option("--name", prepare.name, "shard name prefix")->capture_default_str();
  prepare_cmd->add_option("--shard-tokens", prepare.shard_tokens, "tokens per shard at most")->capture_default_str();
  prepare_cmd->add_option("--threads", prepare.threads, "threads that encode documents; 0: one per core")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  prepare_cmd->add_option("--tokenizer-model", prepare.tokenizer_model,
                          "a SentencePiece model (fp8-data train-tokenizer); default: the bytes tokenizer");

  fp8::data_cli::TrainTokenizerOptions train;
  CLI::App* train_cmd = app.add_subcommand("train-tokenizer", "a SentencePiece model of the inputs' text");
  train_cmd->add_option("inputs", train.inputs, "files, glob patterns, or *.jsonl (a \"text\" field per line)")
      ->required();
  train_cmd->add_option("--out", train.out_prefix, "writes OUT.model and OUT.vocab")->required();
  train_cmd->add_option("--vocab-size", train.vocab_size, "vocabulary size")->capture_default_str();
  train_cmd->add_option("--model-type", train.model_type, "bpe or unigram")->capture_default_str();

  std::string shard;
  int64_t tokens = 200;
  CLI::App* inspect_cmd = app.add_subcommand("inspect", "a token shard's header, documents and first tokens");
  inspect_cmd->add_option("shard", shard, "the shard")->required();
  inspect_cmd->add_option("--tokens", tokens, "tokens to decode")->capture_default_str()->check(CLI::NonNegativeNumber);
  std::string inspect_model;
  inspect_cmd->add_option("--tokenizer-model", inspect_model, "the SentencePiece model that made the shard");

  std::string codec_model, codec_input;
  CLI::App* encode_cmd = app.add_subcommand("encode", "text into token ids, comma-separated");
  encode_cmd->add_option("text", codec_input, "the text")->required();
  encode_cmd->add_option("--tokenizer-model", codec_model, "a SentencePiece model; default: the bytes tokenizer");
  CLI::App* decode_cmd = app.add_subcommand("decode", "comma-separated token ids into text");
  decode_cmd->add_option("ids", codec_input, "the ids, e.g. 72,105; default: a line of standard input");
  decode_cmd->add_option("--tokenizer-model", codec_model, "a SentencePiece model; default: the bytes tokenizer");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (prepare_cmd->parsed()) return run_prepare(prepare);
  if (encode_cmd->parsed()) return run_encode(codec_model, codec_input);
  if (decode_cmd->parsed()) {
    if (decode_cmd->count("ids") == 0 && !std::getline(std::cin, codec_input)) {
      return fail(absl::InvalidArgumentError("decode: no ids given and none on standard input"));
    }
    return run_decode(codec_model, codec_input);
  }
  if (train_cmd->parsed()) {
    if (absl::Status s = fp8::data_cli::train_tokenizer(train); !s.ok()) return fail(s);
    std::printf("%s.model, %s.vocab: %d pieces (%s)\n", train.out_prefix.c_str(), train.out_prefix.c_str(),
                train.vocab_size, train.model_type.c_str());
    return 0;
  }
  absl::StatusOr<std::string> report = fp8::data_cli::inspect(shard, tokens, inspect_model);
  if (!report.ok()) return fail(report.status());
  std::fputs(report->c_str(), stdout);
  return 0;
}
