#include "common/jobspec/validate.h"

#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/jobspec/checks.h"
#include "common/jobspec/model_shapes.h"
#include "common/jobspec/scalars.h"
#include "common/jobspec/validate_fp8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace fp8::jobspec {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr size_t kMaxNameChars = 63;
constexpr size_t kMaxLabelValueChars = 256;
constexpr size_t kMaxFreeTextChars = 1024;
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxBatch = 1 << 20;

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameChars) return false;
  auto ok = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-'; };
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

bool IsLabelKey(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameChars) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-' && c != '/') return false;
  }
  return true;
}

bool IsPrintable(std::string_view s) {
  for (char c : s) {
    // UTF-8 continuation and lead bytes are >= 0x80; only ASCII controls are refused.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// Enum fields hold numbers; a spec built in code (or sent by a newer client) may hold one
// this version does not know.
void CheckEnumsKnown(const Message& message, const std::string& path, Checks& checks) {
  const google::protobuf::Reflection& r = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    std::string field_path = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM && !field->is_repeated()) {
      int number = r.GetEnumValue(message, field);
      if (field->enum_type()->FindValueByNumber(number) == nullptr) {
        checks.Add(field_path, absl::StrCat("unknown value ", number, "; expected one of ",
                                            EnumChoices(*field->enum_type())));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field->is_repeated()) {
      CheckEnumsKnown(r.GetMessage(message, field), field_path, checks);
    }
  }
}

void CheckMetadata(const v1::JobSpec& s, Checks& c) {
  if (c.Required(s.has_name(), "name") && !IsDnsLabel(s.name())) {
    c.Add("name", absl::StrCat("must be a DNS label (lower-case letters, digits and '-', starting and ending "
                               "with a letter or digit, at most 63 characters), got ",
                               Quote(s.name())));
  }
  if (s.owner().size() > kMaxNameChars || !IsPrintable(s.owner())) {
    c.Add("owner", "must be one line of at most 63 characters");
  }
  if (s.description().size() > kMaxFreeTextChars || !IsPrintable(s.description())) {
    c.Add("description", "must be one line of at most 1024 characters");
  }
  c.IntInRange("priority", s.priority(), -1000, 1000);
  for (const auto& [key, value] : s.labels()) {
    std::string field = absl::StrCat("labels.", PathPart(key));
    if (!IsLabelKey(key)) {
      c.Add(field, "label keys are letters, digits, '.', '_', '-' and '/', at most 63 characters");
    }
    if (value.size() > kMaxLabelValueChars || !IsPrintable(value)) {
      c.Add(field, "label values are one line of at most 256 characters");
    }
  }
}

void CheckModel(const v1::JobSpec& s, Checks& c) {
  if (!s.has_model()) {
    c.Add("model", "required section is missing (it needs dim, n_layers, n_heads and max_seq_len)");
    return;
  }
  const v1::ModelSpec& m = s.model();
  bool dim_ok = c.Required(m.has_dim(), "model.dim") && c.IntInRange("model.dim", m.dim(), 1, kMaxWidth);
  if (c.Required(m.has_n_layers(), "model.n_layers"))
    c.IntInRange("model.n_layers", m.n_layers(), 1, kMaxLayers);
  bool heads_ok = c.Required(m.has_n_heads(), "model.n_heads") &&
                  c.IntInRange("model.n_heads", m.n_heads(), 1, kMaxWidth);
  if (c.Required(m.has_max_seq_len(), "model.max_seq_len")) {
    c.IntInRange("model.max_seq_len", m.max_seq_len(), 1, kMaxWidth);
  }
  bool kv_ok = m.has_n_kv_heads() && c.IntInRange("model.n_kv_heads", m.n_kv_heads(), 1, kMaxWidth);
  if (m.has_ffn_dim()) c.IntInRange("model.ffn_dim", m.ffn_dim(), 1, kMaxWidth);
  if (s.data().tokenizer() == v1::DataSpec::SENTENCEPIECE && !m.has_vocab_size()) {
    c.Add("model.vocab_size",
          "required here: data.tokenizer_model could not be read to take the vocabulary from",
          {"data.tokenizer_model"});
  } else if (m.vocab_size() < kByteVocabulary && s.data().tokenizer() == v1::DataSpec::BYTES) {
    c.Add("model.vocab_size", absl::StrCat("must be at least 256, the byte values data.tokenizer bytes "
                                           "produces, got ",
                                           m.vocab_size()));
  } else {
    c.IntInRange("model.vocab_size", m.vocab_size(), 1, kMaxWidth);
  }
  c.Positive("model.rope_theta", m.rope_theta());
  if (m.has_init_from() && m.init_from().empty()) c.Add("model.init_from", "must not be empty (leave it out for none)");
  if (!(m.norm_eps() > 0 && m.norm_eps() < 1)) {
    c.Add("model.norm_eps", absl::StrCat("must be in (0, 1), got ", FormatNumber(m.norm_eps())));
  }

  // Attention geometry, checked only between values that passed their own checks.
  if (dim_ok && heads_ok) {
    if (m.dim() % m.n_heads() != 0) {
      c.Add("model.n_heads", absl::StrCat(m.n_heads(), " does not divide model.dim (", m.dim(), ")"));
    } else if ((m.dim() / m.n_heads()) % 2 != 0) {
      c.Add("model.n_heads", absl::StrCat("gives an odd head_dim, model.dim / model.n_heads = ", m.dim(),
                                          " / ", m.n_heads(), " = ", m.dim() / m.n_heads(),
                                          "; RoPE rotates pairs of channels, so head_dim must be even"));
    }
  }
  if (heads_ok && kv_ok && m.n_heads() % m.n_kv_heads() != 0) {
    c.Add("model.n_kv_heads",
          absl::StrCat(m.n_kv_heads(), " does not divide model.n_heads (", m.n_heads(), ")"));
  }
}

void CheckData(const v1::JobSpec& s, Checks& c) {
  if (!s.has_data()) {
    c.Add("data", "required section is missing (it needs path)");
    return;
  }
  const v1::DataSpec& d = s.data();
  if (c.Required(d.has_path(), "data.path") && d.path().empty()) c.Add("data.path", "must not be empty");
  if (d.has_seq_len() && c.IntInRange("data.seq_len", d.seq_len(), 1, kMaxWidth) &&
      s.model().has_max_seq_len() && d.seq_len() > s.model().max_seq_len()) {
    c.Add("data.seq_len",
          absl::StrCat(d.seq_len(), " exceeds model.max_seq_len (", s.model().max_seq_len(), ")"));
  }
  c.RealInRange("data.val_fraction", d.val_fraction(), 0, 0.5);
  if (d.tokenizer() == v1::DataSpec::SENTENCEPIECE) {
    if (c.Required(d.has_tokenizer_model(), "data.tokenizer_model") && d.tokenizer_model().empty()) {
      c.Add("data.tokenizer_model", "must not be empty");
    }
  } else if (d.has_tokenizer_model()) {
    c.Add("data.tokenizer_model", "is for data.tokenizer sentencepiece; the bytes tokenizer has no model",
          {"data.tokenizer"});
  }
  if (d.has_val_path()) {
    if (d.val_path().empty()) c.Add("data.val_path", "must not be empty (leave it out for none)");
    if (d.val_fraction() != 0) {
      c.Add("data.val_fraction", "give data.val_path or data.val_fraction, not both", {"data.val_path"});
    }
  }
}

void CheckTrain(const v1::JobSpec& s, Checks& c) {
  if (!s.has_train()) {
    c.Add("train", "required section is missing (it needs steps, batch_size and lr)");
    return;
  }
  const v1::TrainSpec& t = s.train();
  bool steps_ok =
      c.Required(t.has_steps(), "train.steps") && c.IntInRange("train.steps", t.steps(), 1, kMaxSteps);
  bool batch_ok = c.Required(t.has_batch_size(), "train.batch_size") &&
                  c.IntInRange("train.batch_size", t.batch_size(), 1, kMaxBatch);
  if (c.IntInRange("train.grad_accum", t.grad_accum(), 1, kMaxBatch) && batch_ok &&
      t.batch_size() % t.grad_accum() != 0) {
    c.Add("train.grad_accum",
          absl::StrCat(t.grad_accum(), " does not divide train.batch_size (", t.batch_size(), ")"));
  }
  bool lr_ok = c.Required(t.has_lr(), "train.lr") && c.Positive("train.lr", t.lr());
  if (t.has_min_lr() && c.NonNegative("train.min_lr", t.min_lr()) && lr_ok && t.min_lr() > t.lr()) {
    c.Add("train.min_lr",
          absl::StrCat(FormatNumber(t.min_lr()), " exceeds train.lr (", FormatNumber(t.lr()), ")"));
  }
  if (c.IntInRange("train.warmup_steps", t.warmup_steps(), 0, kMaxSteps) && steps_ok &&
      t.warmup_steps() > t.steps()) {
    c.Add("train.warmup_steps", absl::StrCat(t.warmup_steps(), " exceeds train.steps (", t.steps(), ")"));
  }
  c.NonNegative("train.weight_decay", t.weight_decay());
  c.RealInRange("train.beta1", t.beta1(), 0, 1, /*max_open=*/true);
  c.RealInRange("train.beta2", t.beta2(), 0, 1, /*max_open=*/true);
  c.Positive("train.eps", t.eps());
  c.NonNegative("train.grad_clip", t.grad_clip());
  c.IntInRange("train.log_every", t.log_every(), 1, kMaxSteps);
  if (c.IntInRange("train.eval_every", t.eval_every(), 0, kMaxSteps) && t.eval_every() > 0 &&
      s.data().val_fraction() == 0 && !s.data().has_val_path()) {
    c.Add("train.eval_every", "evaluation needs held-out data, but data.val_fraction is 0 and there is no data.val_path",
          {"data.val_fraction"});
  }
  c.IntInRange("train.eval_batches", t.eval_batches(), 1, kMaxBatch);
  c.IntInRange("train.progress_timeout_seconds", t.progress_timeout_seconds(), 0, 86400);
  c.IntInRange("train.collective_timeout_seconds", t.collective_timeout_seconds(), 0, 86400);
}

void CheckOperations(const v1::JobSpec& s, Checks& c) {
  const v1::CheckpointSpec& ck = s.checkpoint();
  if (ck.has_dir() && ck.dir().empty()) c.Add("checkpoint.dir", "must not be empty");
  c.IntInRange("checkpoint.every", ck.every(), 0, kMaxSteps);
  c.IntInRange("checkpoint.keep", ck.keep(), 1, 1000);

  const v1::ResourceSpec& r = s.resources();
  c.IntInRange("resources.world_size", r.world_size(), 1, kMaxWorldSize);
  c.IntInRange("resources.cpus_per_rank", r.cpus_per_rank(), 1, 1024);
  if (r.has_memory_gb()) c.Positive("resources.memory_gb", r.memory_gb());

  c.IntInRange("restarts.max_restarts", s.restarts().max_restarts(), 0, 100);
  c.IntInRange("restarts.backoff_seconds", s.restarts().backoff_seconds(), 0, 3600);
}

}  // namespace

Issues FindSpecIssues(const v1::JobSpec& spec) {
  Issues issues;
  Checks checks(issues);
  CheckEnumsKnown(spec, "", checks);
  CheckMetadata(spec, checks);
  CheckModel(spec, checks);
  CheckData(spec, checks);
  CheckTrain(spec, checks);
  CheckOperations(spec, checks);
  CheckFp8(spec, checks);
  return issues;
}

}  // namespace fp8::jobspec
