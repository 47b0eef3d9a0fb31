#include "common/jobspec/validate.h"

#include <cstdint>
#include <string>
#include <vector>

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

bool is_dns_label(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameChars) return false;
  auto ok = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-'; };
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

bool is_label_key(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameChars) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-' && c != '/') return false;
  }
  return true;
}

bool is_printable(std::string_view s) {
  for (char c : s) {
    // UTF-8 continuation and lead bytes are >= 0x80; only ASCII controls are refused.
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

// Enum fields hold numbers; a spec built in code (or sent by a newer client) may hold one
// this version does not know.
void check_enums_known(const Message& message, const std::string& path, Checks& checks) {
  const google::protobuf::Reflection& r = *message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    std::string field_path = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_ENUM && !field->is_repeated()) {
      int number = r.GetEnumValue(message, field);
      if (field->enum_type()->FindValueByNumber(number) == nullptr) {
        checks.add(field_path, absl::StrCat("unknown value ", number, "; expected one of ",
                                            enum_choices(*field->enum_type())));
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field->is_repeated()) {
      check_enums_known(r.GetMessage(message, field), field_path, checks);
    }
  }
}

void check_metadata(const v1::JobSpec& s, Checks& c) {
  if (c.required(s.has_name(), "name") && !is_dns_label(s.name())) {
    c.add("name", absl::StrCat("must be a DNS label (lower-case letters, digits and '-', starting and ending "
                               "with a letter or digit, at most 63 characters), got ",
                               quote(s.name())));
  }
  if (s.owner().size() > kMaxNameChars || !is_printable(s.owner())) {
    c.add("owner", "must be one line of at most 63 characters");
  }
  if (s.description().size() > kMaxFreeTextChars || !is_printable(s.description())) {
    c.add("description", "must be one line of at most 1024 characters");
  }
  c.int_in_range("priority", s.priority(), -1000, 1000);
  for (const auto& [key, value] : s.labels()) {
    std::string field = absl::StrCat("labels.", path_part(key));
    if (!is_label_key(key)) {
      c.add(field, "label keys are letters, digits, '.', '_', '-' and '/', at most 63 characters");
    }
    if (value.size() > kMaxLabelValueChars || !is_printable(value)) {
      c.add(field, "label values are one line of at most 256 characters");
    }
  }
}

void check_model(const v1::JobSpec& s, Checks& c) {
  if (!s.has_model()) {
    c.add("model", "required section is missing (it needs dim, n_layers, n_heads and max_seq_len)");
    return;
  }
  const v1::ModelSpec& m = s.model();
  bool dim_ok = c.required(m.has_dim(), "model.dim") && c.int_in_range("model.dim", m.dim(), 1, kMaxWidth);
  if (c.required(m.has_n_layers(), "model.n_layers"))
    c.int_in_range("model.n_layers", m.n_layers(), 1, kMaxLayers);
  bool heads_ok = c.required(m.has_n_heads(), "model.n_heads") &&
                  c.int_in_range("model.n_heads", m.n_heads(), 1, kMaxWidth);
  if (c.required(m.has_max_seq_len(), "model.max_seq_len")) {
    c.int_in_range("model.max_seq_len", m.max_seq_len(), 1, kMaxWidth);
  }
  bool kv_ok = m.has_n_kv_heads() && c.int_in_range("model.n_kv_heads", m.n_kv_heads(), 1, kMaxWidth);
  if (m.has_ffn_dim()) c.int_in_range("model.ffn_dim", m.ffn_dim(), 1, kMaxWidth);
  if (s.data().tokenizer() == v1::DataSpec::SENTENCEPIECE && !m.has_vocab_size()) {
    c.add("model.vocab_size",
          "required here: data.tokenizer_model could not be read to take the vocabulary from",
          {"data.tokenizer_model"});
  } else if (m.vocab_size() < kByteVocabulary && s.data().tokenizer() == v1::DataSpec::BYTES) {
    c.add("model.vocab_size", absl::StrCat("must be at least 256, the byte values data.tokenizer bytes "
                                           "produces, got ",
                                           m.vocab_size()));
  } else {
    c.int_in_range("model.vocab_size", m.vocab_size(), 1, kMaxWidth);
  }
  c.positive("model.rope_theta", m.rope_theta());
  if (m.has_init_from() && m.init_from().empty()) c.add("model.init_from", "must not be empty (leave it out for none)");
  if (!(m.norm_eps() > 0 && m.norm_eps() < 1)) {
    c.add("model.norm_eps", absl::StrCat("must be in (0, 1), got ", format_number(m.norm_eps())));
  }

  // Attention geometry, checked only between values that passed their own checks.
  if (dim_ok && heads_ok) {
    if (m.dim() % m.n_heads() != 0) {
      c.add("model.n_heads", absl::StrCat(m.n_heads(), " does not divide model.dim (", m.dim(), ")"));
    } else if ((m.dim() / m.n_heads()) % 2 != 0) {
      c.add("model.n_heads", absl::StrCat("gives an odd head_dim, model.dim / model.n_heads = ", m.dim(),
                                          " / ", m.n_heads(), " = ", m.dim() / m.n_heads(),
                                          "; RoPE rotates pairs of channels, so head_dim must be even"));
    }
  }
  if (heads_ok && kv_ok && m.n_heads() % m.n_kv_heads() != 0) {
    c.add("model.n_kv_heads",
          absl::StrCat(m.n_kv_heads(), " does not divide model.n_heads (", m.n_heads(), ")"));
  }
}

void check_data(const v1::JobSpec& s, Checks& c) {
  if (!s.has_data()) {
    c.add("data", "required section is missing (it needs path)");
    return;
  }
  const v1::DataSpec& d = s.data();
  if (c.required(d.has_path(), "data.path") && d.path().empty()) c.add("data.path", "must not be empty");
  if (d.has_seq_len() && c.int_in_range("data.seq_len", d.seq_len(), 1, kMaxWidth) &&
      s.model().has_max_seq_len() && d.seq_len() > s.model().max_seq_len()) {
    c.add("data.seq_len",
          absl::StrCat(d.seq_len(), " exceeds model.max_seq_len (", s.model().max_seq_len(), ")"));
  }
  c.real_in_range("data.val_fraction", d.val_fraction(), 0, 0.5);
  if (d.tokenizer() == v1::DataSpec::SENTENCEPIECE) {
    if (c.required(d.has_tokenizer_model(), "data.tokenizer_model") && d.tokenizer_model().empty()) {
      c.add("data.tokenizer_model", "must not be empty");
    }
  } else if (d.has_tokenizer_model()) {
    c.add("data.tokenizer_model", "is for data.tokenizer sentencepiece; the bytes tokenizer has no model",
          {"data.tokenizer"});
  }
  if (d.has_val_path()) {
    if (d.val_path().empty()) c.add("data.val_path", "must not be empty (leave it out for none)");
    if (d.val_fraction() != 0) {
      c.add("data.val_fraction", "give data.val_path or data.val_fraction, not both", {"data.val_path"});
    }
  }
}

void check_train(const v1::JobSpec& s, Checks& c) {
  if (!s.has_train()) {
    c.add("train", "required section is missing (it needs steps, batch_size and lr)");
    return;
  }
  const v1::TrainSpec& t = s.train();
  bool steps_ok =
      c.required(t.has_steps(), "train.steps") && c.int_in_range("train.steps", t.steps(), 1, kMaxSteps);
  bool batch_ok = c.required(t.has_batch_size(), "train.batch_size") &&
                  c.int_in_range("train.batch_size", t.batch_size(), 1, kMaxBatch);
  if (c.int_in_range("train.grad_accum", t.grad_accum(), 1, kMaxBatch) && batch_ok &&
      t.batch_size() % t.grad_accum() != 0) {
    c.add("train.grad_accum",
          absl::StrCat(t.grad_accum(), " does not divide train.batch_size (", t.batch_size(), ")"));
  }
  bool lr_ok = c.required(t.has_lr(), "train.lr") && c.positive("train.lr", t.lr());
  if (t.has_min_lr() && c.non_negative("train.min_lr", t.min_lr()) && lr_ok && t.min_lr() > t.lr()) {
    c.add("train.min_lr",
          absl::StrCat(format_number(t.min_lr()), " exceeds train.lr (", format_number(t.lr()), ")"));
  }
  if (c.int_in_range("train.warmup_steps", t.warmup_steps(), 0, kMaxSteps) && steps_ok &&
      t.warmup_steps() > t.steps()) {
    c.add("train.warmup_steps", absl::StrCat(t.warmup_steps(), " exceeds train.steps (", t.steps(), ")"));
  }
  c.non_negative("train.weight_decay", t.weight_decay());
  c.real_in_range("train.beta1", t.beta1(), 0, 1, /*max_open=*/true);
  c.real_in_range("train.beta2", t.beta2(), 0, 1, /*max_open=*/true);
  c.positive("train.eps", t.eps());
  c.non_negative("train.grad_clip", t.grad_clip());
  c.int_in_range("train.log_every", t.log_every(), 1, kMaxSteps);
  if (c.int_in_range("train.eval_every", t.eval_every(), 0, kMaxSteps) && t.eval_every() > 0 &&
      s.data().val_fraction() == 0 && !s.data().has_val_path()) {
    c.add("train.eval_every", "evaluation needs held-out data, but data.val_fraction is 0 and there is no data.val_path",
          {"data.val_fraction"});
  }
  c.int_in_range("train.eval_batches", t.eval_batches(), 1, kMaxBatch);
  c.int_in_range("train.progress_timeout_seconds", t.progress_timeout_seconds(), 0, 86400);
  c.int_in_range("train.collective_timeout_seconds", t.collective_timeout_seconds(), 0, 86400);
}

void check_operations(const v1::JobSpec& s, Checks& c) {
  const v1::CheckpointSpec& ck = s.checkpoint();
  if (ck.has_dir() && ck.dir().empty()) c.add("checkpoint.dir", "must not be empty");
  c.int_in_range("checkpoint.every", ck.every(), 0, kMaxSteps);
  c.int_in_range("checkpoint.keep", ck.keep(), 1, 1000);

  const v1::ResourceSpec& r = s.resources();
  c.int_in_range("resources.world_size", r.world_size(), 1, kMaxWorldSize);
  c.int_in_range("resources.cpus_per_rank", r.cpus_per_rank(), 1, 1024);
  if (r.has_memory_gb()) c.positive("resources.memory_gb", r.memory_gb());

  c.int_in_range("restarts.max_restarts", s.restarts().max_restarts(), 0, 100);
  c.int_in_range("restarts.backoff_seconds", s.restarts().backoff_seconds(), 0, 3600);
}

// Tensor parallelism (parallel.tensor): the mesh and the model's split. The fp8 side (what
// is not supported with it yet) is check_fp8's.
void check_parallel(const v1::JobSpec& s, Checks& c) {
  const int64_t tensor = s.parallel().tensor();
  if (!c.int_in_range("parallel.tensor", tensor, 1, kMaxTensorParallel)) return;
  if (tensor == 1) {
    if (s.parallel().sequence()) {
      c.add("parallel.sequence", "needs tensor parallelism: set parallel.tensor > 1 (the ranks that share the tokens)");
    }
    return;
  }
  const std::vector<std::string> at_tensor = {"parallel.tensor"};
  if (s.parallel().sequence()) {
    // Each rank holds an equal share of every micro-batch's tokens.
    if (s.data().seq_len() > 0 && s.data().seq_len() % tensor != 0) {
      c.add("data.seq_len",
            absl::StrCat(s.data().seq_len(), " is not a multiple of parallel.tensor (", tensor,
                         "): with parallel.sequence each tensor-parallel rank holds an equal share of the tokens"),
            {"parallel.sequence"});
    }
  }
  const int64_t world = s.resources().world_size();
  if (world >= 1 && world <= kMaxWorldSize) {  // else reported by check_operations
    if (world % tensor != 0) {
      c.add("resources.world_size",
            absl::StrCat(world, " is not a multiple of parallel.tensor (", tensor,
                         "), the ranks of one tensor-parallel group; set it to parallel.tensor times the "
                         "data-parallel groups"),
            at_tensor);
    }
  }
  const v1::ModelSpec& m = s.model();
  struct Split {
    const char* field;
    int64_t value;
    const char* of_what;
  };
  const Split splits[] = {{"model.n_heads", m.n_heads(), "the heads"},
                          {"model.n_kv_heads", m.n_kv_heads(), "the key/value heads"},
                          {"model.ffn_dim", m.ffn_dim(), "the feed-forward columns"}};
  for (const Split& split : splits) {
    if (split.value >= 1 && split.value % tensor != 0) {  // values < 1 are check_model's
      c.add(split.field,
            absl::StrCat(split.value, " is not divisible by parallel.tensor (", tensor,
                         "); each tensor-parallel rank holds an equal share of ", split.of_what),
            at_tensor);
    }
  }
}

}  // namespace

Issues find_spec_issues(const v1::JobSpec& spec) {
  Issues issues;
  Checks checks(issues);
  check_enums_known(spec, "", checks);
  check_metadata(spec, checks);
  check_model(spec, checks);
  check_data(spec, checks);
  check_train(spec, checks);
  check_operations(spec, checks);
  check_parallel(spec, checks);
  check_fp8(spec, checks);
  return issues;
}

}  // namespace fp8::jobspec
