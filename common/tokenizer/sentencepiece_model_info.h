// What a job needs to know of a SentencePiece model without loading the library: its
// vocabulary size and end-of-sentence id, read from the model file's protobuf encoding.
//
// Why not the library: Debian's libsentencepiece carries its own copy of protobuf-lite and
// exports it, which breaks any process that also loads libprotobuf (every binary here
// that reads a JobSpec) before main runs. Only fp8-data, which reads no protobuf of its
// own, links the library (sentencepiece_model.h) to train and encode.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fp8::tokenizer {

struct SentencePieceModelInfo {
  int pieces = 0;   // the vocabulary size
  int eos_id = 2;   // TrainerSpec.eos_id (-1: none)
};

// From a .model file's bytes (ModelProto: pieces are field 1, the TrainerSpec field 2 with
// eos_id as its field 42). nullopt with `*error` set when the bytes are not such a message.
std::optional<SentencePieceModelInfo> read_sentence_piece_model_info(std::string_view model, std::string* error);

}  // namespace fp8::tokenizer
