// The only file that includes SentencePiece's headers (sentencepiece_model.h says why).
#include "common/tokenizer/sentencepiece_model.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace fp8::tokenizer {

struct SentencePieceModel::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

SentencePieceModel::SentencePieceModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::load(const std::string& model, std::string* error) {
  auto impl = std::make_unique<Impl>();
  const sentencepiece::util::Status s = impl->processor.LoadFromSerializedProto(model);
  if (!s.ok()) {
    *error = s.ToString();
    return nullptr;
  }
  return std::unique_ptr<SentencePieceModel>(new SentencePieceModel(std::move(impl)));
}

int SentencePieceModel::piece_size() const { return impl_->processor.GetPieceSize(); }
int SentencePieceModel::eos_id() const { return impl_->processor.eos_id(); }

bool SentencePieceModel::encode(std::string_view text, std::vector<int>* ids, std::string* error) const {
  std::vector<int> encoded;
  const sentencepiece::util::Status s = impl_->processor.Encode(text, &encoded);
  if (!s.ok()) {
    *error = s.ToString();
    return false;
  }
  ids->insert(ids->end(), encoded.begin(), encoded.end());
  return true;
}

std::string SentencePieceModel::decode(const std::vector<int>& ids) const {
  std::string text;
  if (!impl_->processor.Decode(ids, &text).ok()) return "";
  return text;
}

std::string SentencePieceModel::train(const std::string& flags) {
  const sentencepiece::util::Status s = sentencepiece::SentencePieceTrainer::Train(flags);
  return s.ok() ? "" : s.ToString();
}

}  // namespace fp8::tokenizer
