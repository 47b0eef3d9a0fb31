#include "worker/engine/hf/generate.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/status_macros.h"

namespace fp8::hf {

absl::StatusOr<Generation> generate(NextTokenModel& decoder, std::span<const int32_t> prompt, int64_t max_new_tokens,
                                    Sampler& sampler, const std::function<bool(int32_t)>& stop) {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  if (max_new_tokens < 0) return absl::InvalidArgumentError("max_new_tokens is negative");
  decoder.reset();
  absl::StatusOr<std::span<const float>> first = decoder.feed(prompt);
  if (!first.ok()) return absl::InvalidArgumentError(absl::StrCat("prompt: ", first.status().message()));
  std::span<const float> logits = *first;
  Generation out;
  while (static_cast<int64_t>(out.tokens.size()) < max_new_tokens) {
    const int32_t token = sampler.next(logits);
    out.tokens.push_back(token);
    if (stop && stop(token)) break;
    if (static_cast<int64_t>(out.tokens.size()) == max_new_tokens) break;
    if (decoder.position() == decoder.max_seq_len()) {
      out.context_full = true;
      break;
    }
    FP8_ASSIGN_OR_RETURN(logits, decoder.feed(token));
  }
  return out;
}

}  // namespace fp8::hf
