// model.vocab_size of a SentencePiece job, when the job leaves it out: the vocabulary of
// its data.tokenizer_model, read where the job file is loaded (fp8ctl, fp8-train). The
// coordinator then receives a spec that states it.
#pragma once

#include <string>

#include "fp8/v1/job.pb.h"

namespace fp8::jobspec {

// Sets model.vocab_size from data.tokenizer_model when the tokenizer is sentencepiece and
// the size is not given. Returns "" or, when the model cannot be loaded, why (validation
// then reports model.vocab_size as required).
std::string fill_vocab_from_tokenizer(v1::JobSpec& spec);

}  // namespace fp8::jobspec
