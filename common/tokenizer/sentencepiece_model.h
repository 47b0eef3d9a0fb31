// A SentencePiece model behind a plain C++ interface, for fp8-data only: a process that
// loads libprotobuf must not load SentencePiece (sentencepiece_model_info.h says why).
// SentencePiece's public header declares its own `absl::string_view`, which clashes with
// Abseil's: only sentencepiece_model.cc includes it, kept out of unity builds.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fp8::tokenizer {

class SentencePieceModel {
 public:
  // The model serialized in `model` (a .model file's bytes); null with `*error` set when
  // the bytes are not one.
  static std::unique_ptr<SentencePieceModel> load(const std::string& model, std::string* error);
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  int piece_size() const;
  int eos_id() const;  // -1 when the model has no end-of-sentence piece
  // Appends `text`'s ids; false with `*error` set on failure.
  bool encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  std::string decode(const std::vector<int>& ids) const;

  // SentencePieceTrainer::Train with its flags (e.g. "--input=a.txt --model_prefix=m
  // --vocab_size=1000"); "" on success, else the error.
  static std::string train(const std::string& flags);

 private:
  struct Impl;
  explicit SentencePieceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8::tokenizer
