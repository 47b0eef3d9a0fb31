#include "common/tokenizer/sentencepiece_model_info.h"

#include <cstdint>

namespace fp8::tokenizer {
namespace {

// A reader of protobuf's wire format over one message's bytes.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  bool done() const { return p_ == end_; }

  bool varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const auto byte = static_cast<uint8_t>(*p_++);
      *v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }
  // The next field: its number and wire type; a length-delimited field's bytes in `*bytes`,
  // a varint's value in `*value`; anything else skipped.
  bool field(int* number, int* type, std::string_view* bytes, uint64_t* value) {
    uint64_t key = 0;
    if (!varint(&key)) return false;
    *number = static_cast<int>(key >> 3);
    *type = static_cast<int>(key & 7);
    switch (*type) {
      case 0:
        return varint(value);
      case 1:
        return skip(8);
      case 2: {
        uint64_t length = 0;
        if (!varint(&length) || length > static_cast<uint64_t>(end_ - p_)) return false;
        *bytes = std::string_view(p_, length);
        p_ += length;
        return true;
      }
      case 5:
        return skip(4);
      default:
        return false;
    }
  }

 private:
  bool skip(int64_t n) {
    if (n > end_ - p_) return false;
    p_ += n;
    return true;
  }
  const char* p_;
  const char* end_;
};

constexpr int kPieces = 1, kTrainerSpec = 2, kEosId = 42;

}  // namespace

std::optional<SentencePieceModelInfo> read_sentence_piece_model_info(std::string_view model, std::string* error) {
  SentencePieceModelInfo info;
  WireReader reader(model);
  while (!reader.done()) {
    int number = 0, type = 0;
    std::string_view bytes;
    uint64_t value = 0;
    if (!reader.field(&number, &type, &bytes, &value)) {
      *error = "not a SentencePiece model (its encoding breaks off)";
      return std::nullopt;
    }
    if (number == kPieces && type == 2) ++info.pieces;
    if (number != kTrainerSpec || type != 2) continue;
    WireReader spec(bytes);
    while (!spec.done()) {
      if (!spec.field(&number, &type, &bytes, &value)) {
        *error = "not a SentencePiece model (its trainer spec breaks off)";
        return std::nullopt;
      }
      // An int32 field's varint holds the value sign-extended to 64 bits.
      if (number == kEosId && type == 0) info.eos_id = static_cast<int32_t>(static_cast<uint32_t>(value));
    }
  }
  if (info.pieces == 0) {
    *error = "not a SentencePiece model (it holds no pieces)";
    return std::nullopt;
  }
  return info;
}

}  // namespace fp8::tokenizer
