#include "common/jobspec/tokenizer_vocab.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "common/tokenizer/sentencepiece_model_info.h"

namespace fp8::jobspec {

std::string fill_vocab_from_tokenizer(v1::JobSpec& spec) {
  const v1::DataSpec& d = spec.data();
  if (d.tokenizer() != v1::DataSpec::SENTENCEPIECE || !d.has_tokenizer_model() || spec.model().has_vocab_size()) {
    return "";
  }
  std::ifstream in(d.tokenizer_model(), std::ios::binary);
  if (!in) return d.tokenizer_model() + ": cannot open";
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::string error;
  const std::optional<tokenizer::SentencePieceModelInfo> info =
      tokenizer::read_sentence_piece_model_info(bytes.str(), &error);
  if (!info) return d.tokenizer_model() + ": " + error;
  spec.mutable_model()->set_vocab_size(info->pieces);
  return "";
}

}  // namespace fp8::jobspec
