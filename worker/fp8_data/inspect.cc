#include "worker/fp8_data/inspect.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/engine/data/corpus.h"
#include "worker/engine/data/token_shard.h"
#include "worker/engine/data/token_stream.h"
#include "worker/engine/data/tokenizer.h"
#include "worker/fp8_data/sentencepiece_tokenizer.h"

namespace fp8::data_cli {
namespace {

std::string decode(const engine::data::TokenStream& stream, int64_t count, bool bytes, uint32_t end_of_text) {
  std::string out;
  for (int64_t i = 0; i < count; ++i) {
    const int32_t t = stream.at(i);
    if (!bytes) {
      absl::StrAppend(&out, i == 0 ? "" : " ", t);
    } else if (static_cast<uint32_t>(t) == end_of_text) {
      out += "<|end of text|>";
    } else if (t == '\n' || t == '\t' || t >= 0x20) {
      out += static_cast<char>(t);
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", t);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> inspect(const std::string& path, int64_t tokens, const std::string& tokenizer_model) {
  absl::StatusOr<engine::data::TokenShard> shard = engine::data::TokenShard::open(path);
  if (!shard.ok()) return shard.status();
  const engine::data::TokenShardHeader& h = shard->header();
  std::unique_ptr<engine::data::Tokenizer> tokenizer;
  if (!tokenizer_model.empty()) {
    absl::StatusOr<std::unique_ptr<engine::data::Tokenizer>> spm =
        load_sentence_piece(tokenizer_model, "--tokenizer-model");
    if (!spm.ok()) return spm.status();
    if ((*spm)->fingerprint() != h.tokenizer) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tokenizer-model ", tokenizer_model, " did not make the tokens of ", path));
    }
    tokenizer = *std::move(spm);
  }
  const engine::data::TokenStream stream({shard->tokens()});
  int64_t documents = 0;
  for (int64_t i = 0; i < stream.size(); ++i) documents += static_cast<uint32_t>(stream.at(i)) == h.end_of_text;
  const bool bytes = h.tokenizer == engine::data::tokenizer_fingerprint(engine::data::kBytesTokenizerName);
  const std::string name = bytes ? "bytes" : tokenizer != nullptr ? tokenizer->name() : "unknown (give --tokenizer-model)";
  std::string out;
  absl::StrAppend(&out, "shard       ", path, "\n");
  absl::StrAppendFormat(&out, "format      version %d, %d-byte tokens\n", engine::data::kTokenShardVersion, h.width);
  absl::StrAppendFormat(&out, "tokenizer   %s (fingerprint %016x), vocabulary %d, end of text %d\n", name,
                        h.tokenizer, h.vocab_size, h.end_of_text);
  absl::StrAppendFormat(&out, "tokens      %d\n", h.tokens);
  absl::StrAppendFormat(&out, "documents   %d (end-of-text ids)\n", documents);
  const int64_t shown = std::min(tokens, stream.size());
  std::string text;
  if (tokenizer != nullptr) {
    std::vector<int32_t> ids(static_cast<size_t>(shown));
    stream.copy(0, shown, ids.data());
    text = tokenizer->decode(ids);
  } else {
    text = decode(stream, shown, bytes, h.end_of_text);
  }
  absl::StrAppendFormat(&out, "first %d tokens:\n%s\n", shown, text);
  return out;
}

}  // namespace fp8::data_cli
