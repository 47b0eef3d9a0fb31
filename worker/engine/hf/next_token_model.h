// What generation needs of a model: next-token logits after the tokens fed so far
// (DeviceDecoder, with a KV cache on any engine device, is the one).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

namespace fp8::hf {

class NextTokenModel {
 public:
  virtual ~NextTokenModel() = default;

  // Feeds `tokens` at positions position() .. position() + size - 1 and returns the logits
  // of the token after the last ([vocab_size], valid until the next call). A prompt goes in
  // one call: its tokens are computed together. InvalidArgument, with nothing fed, for no
  // tokens, a token outside the vocabulary, or more than the context has room for.
  virtual absl::StatusOr<std::span<const float>> feed(std::span<const int32_t> tokens) = 0;
  absl::StatusOr<std::span<const float>> feed(int32_t token) { return feed(std::span<const int32_t>(&token, 1)); }
  // Tokens fed since the start (or the last reset).
  virtual int64_t position() const = 0;
  virtual int64_t max_seq_len() const = 0;
  virtual void reset() = 0;
};

}  // namespace fp8::hf
