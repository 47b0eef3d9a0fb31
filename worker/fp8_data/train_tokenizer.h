// `fp8-data train-tokenizer`: a SentencePiece model of a job's text, for
// `data.tokenizer: sentencepiece` and `fp8-data prepare --tokenizer-model`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace fp8::data_cli {

struct TrainTokenizerOptions {
  std::vector<std::string> inputs;  // files, patterns, *.jsonl, as prepare takes them
  std::string out_prefix;           // writes <out_prefix>.model and <out_prefix>.vocab
  int vocab_size = 8000;
  std::string model_type = "bpe";   // bpe or unigram
};

// A SentencePiece model of the inputs' documents (UTF-8 checked as prepare checks them),
// with an end-of-sentence piece to end documents. Errors name the input or repeat
// SentencePiece's (a vocabulary larger than the text allows, say).
absl::Status train_tokenizer(const TrainTokenizerOptions& options);

}  // namespace fp8::data_cli
