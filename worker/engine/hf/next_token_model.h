// What generation needs of a model: next-token logits, one fed token at a time
// (DeviceDecoder, with a KV cache on any engine device, is the one).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

namespace fp8::hf {

class NextTokenModel {
 public:
  virtual ~NextTokenModel() = default;

  // Feeds the token at position position() and returns the logits of the next token
  // ([vocab_size], valid until the next call). InvalidArgument for a token outside the
  // vocabulary or a context already max_seq_len long.
  virtual absl::StatusOr<std::span<const float>> feed(int32_t token) = 0;
  // Tokens fed since the start (or the last reset).
  virtual int64_t position() const = 0;
  virtual int64_t max_seq_len() const = 0;
  virtual void reset() = 0;
};

}  // namespace fp8::hf
