// Text generation: the prompt fed through a model in one call (next_token_model.h: a
// DeviceDecoder fills its KV cache with it), then one sampled token at a time until
// max_new_tokens, a stop token, or a full context.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/engine/hf/next_token_model.h"
#include "worker/engine/hf/sampler.h"

namespace fp8::hf {

struct Generation {
  std::vector<int32_t> tokens;  // the new ones, a stop token included
  bool context_full = false;    // stopped at max_seq_len
};

// `stop` (may be empty) ends generation after a token for which it is true. The decoder
// starts over. An empty prompt, or one longer than the context, is an InvalidArgument.
absl::StatusOr<Generation> generate(NextTokenModel& decoder, std::span<const int32_t> prompt, int64_t max_new_tokens,
                                    Sampler& sampler, const std::function<bool(int32_t)>& stop = {});

}  // namespace fp8::hf
