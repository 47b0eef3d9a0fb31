#include "common/jobspec/defaults.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/jobspec/fp8_recipes.h"
#include "common/jobspec/model_shapes.h"

namespace fp8::jobspec {
namespace {

using v1::JobSpec;

// ---- derived defaults: what each derives to, from the current spec ------------------------
// nullopt where the input is missing (or nonsensical): the field then stays unset, and
// validation reports the input, not the field derived from it.

std::optional<int32_t> derived_kv_heads(const JobSpec& s) {
  if (!s.model().has_n_heads()) return std::nullopt;
  return s.model().n_heads();
}

std::optional<int32_t> derived_ffn_dim(const JobSpec& s) {
  if (!s.model().has_dim() || s.model().dim() <= 0) return std::nullopt;
  int64_t ffn = llama_ffn_dim(s.model().dim());
  if (ffn > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(ffn);
}

std::optional<int32_t> derived_seq_len(const JobSpec& s) {
  if (!s.model().has_max_seq_len()) return std::nullopt;
  return s.model().max_seq_len();
}

std::optional<double> derived_min_lr(const JobSpec& s) {
  if (!s.train().has_lr()) return std::nullopt;
  // Rounded to 15 significant digits, so that lr 3e-3 gives 0.0003 rather than the
  // 0.00030000000000000003 that division yields: what is printed is what was meant.
  double tenth = s.train().lr() / 10;
  char text[32];
  std::snprintf(text, sizeof(text), "%.15g", tenth);
  return std::strtod(text, nullptr);
}

std::optional<bool> derived_power_of2_scales(const JobSpec& s) {
  return recipe_uses_power_of2_scales(s.fp8().recipe());
}

std::optional<bool> derived_all_gather_fp8(const JobSpec& s) {
  const v1::Float8Gemms gemms = effective_gemms(s.fp8());
  // Tensor-parallel ranks alone hold their shares whole: no FSDP gathers anything.
  if (s.parallel().tensor() > 1 && data_parallel_ranks(s) == 1) return false;
  // Only a weight no GEMM reads in high precision can be gathered as codes and used as
  // gathered.
  return s.fp8().recipe() != v1::Fp8Spec::NONE && weight_gathers_in_fp8(gemms);
}

std::optional<std::string> derived_checkpoint_dir(const JobSpec& s) {
  if (!s.has_name() || s.name().empty()) return std::nullopt;
  return absl::StrCat("checkpoints/", s.name());
}

// ---- the table that lets a derived default step aside -------------------------------------

struct DerivedDefault {
  std::string_view field;
  std::string_view inputs[4];  // dotted paths it derives from ("" = none)
  bool (*holds_derived_value)(const JobSpec&);
  void (*clear)(JobSpec&);
};

const DerivedDefault kDerivedDefaults[] = {
    {"model.n_kv_heads",
     {"model.n_heads", ""},
     [](const JobSpec& s) {
       return s.model().has_n_kv_heads() && derived_kv_heads(s) == s.model().n_kv_heads();
     },
     [](JobSpec& s) { s.mutable_model()->clear_n_kv_heads(); }},
    {"model.ffn_dim",
     {"model.dim", ""},
     [](const JobSpec& s) { return s.model().has_ffn_dim() && derived_ffn_dim(s) == s.model().ffn_dim(); },
     [](JobSpec& s) { s.mutable_model()->clear_ffn_dim(); }},
    {"data.seq_len",
     {"model.max_seq_len", ""},
     [](const JobSpec& s) { return s.data().has_seq_len() && derived_seq_len(s) == s.data().seq_len(); },
     [](JobSpec& s) { s.mutable_data()->clear_seq_len(); }},
    {"train.min_lr",
     {"train.lr", ""},
     [](const JobSpec& s) { return s.train().has_min_lr() && derived_min_lr(s) == s.train().min_lr(); },
     [](JobSpec& s) { s.mutable_train()->clear_min_lr(); }},
    {"fp8.power_of_2_scales",
     {"fp8.recipe", ""},
     [](const JobSpec& s) {
       return s.fp8().has_power_of_2_scales() && derived_power_of2_scales(s) == s.fp8().power_of_2_scales();
     },
     [](JobSpec& s) { s.mutable_fp8()->clear_power_of_2_scales(); }},
    {"fp8.all_gather_fp8",
     {"fp8.recipe", "fp8.gemms", "parallel.tensor", "resources.world_size"},
     [](const JobSpec& s) {
       return s.fp8().has_all_gather_fp8() && derived_all_gather_fp8(s) == s.fp8().all_gather_fp8();
     },
     [](JobSpec& s) { s.mutable_fp8()->clear_all_gather_fp8(); }},
    {"checkpoint.dir",
     {"name", "parallel.tensor", ""},
     [](const JobSpec& s) {
       return s.checkpoint().has_dir() && derived_checkpoint_dir(s) == s.checkpoint().dir();
     },
     [](JobSpec& s) { s.mutable_checkpoint()->clear_dir(); }},
};

// Whether `prefix` is `path` or one of its enclosing fields ("model" of "model.dim").
bool is_path_or_parent(std::string_view prefix, std::string_view path) {
  if (!path.starts_with(prefix)) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.';
}

// ---- constants, section by section --------------------------------------------------------

// A SentencePiece job's vocabulary comes from its tokenizer model (tokenizer_vocab.h).
void fill_model(v1::ModelSpec& m, v1::DataSpec::Tokenizer tokenizer) {
  if (m.architecture() == v1::ModelSpec::ARCHITECTURE_UNSPECIFIED) m.set_architecture(v1::ModelSpec::LLAMA);
  if (!m.has_vocab_size() && tokenizer != v1::DataSpec::SENTENCEPIECE) m.set_vocab_size(kByteVocabulary);
  if (!m.has_rope_theta()) m.set_rope_theta(10000);
  if (!m.has_norm_eps()) m.set_norm_eps(1e-5);
  if (!m.has_tie_embeddings()) m.set_tie_embeddings(false);
}

void fill_data(v1::DataSpec& d) {
  if (d.tokenizer() == v1::DataSpec::TOKENIZER_UNSPECIFIED) d.set_tokenizer(v1::DataSpec::BYTES);
  if (!d.has_val_fraction()) d.set_val_fraction(d.has_val_path() ? 0 : 0.05);
  if (!d.has_seed()) d.set_seed(0);
}

void fill_train(v1::TrainSpec& t) {
  if (!t.has_grad_accum()) t.set_grad_accum(1);
  if (t.compute_dtype() == v1::TrainSpec::COMPUTE_DTYPE_UNSPECIFIED) t.set_compute_dtype(v1::TrainSpec::FP32);
  if (t.activation_checkpointing() == v1::TrainSpec::ACTIVATION_CHECKPOINTING_UNSPECIFIED) {
    t.set_activation_checkpointing(v1::TrainSpec::NONE);
  }
  if (!t.has_warmup_steps()) t.set_warmup_steps(0);
  if (t.schedule() == v1::TrainSpec::SCHEDULE_UNSPECIFIED) t.set_schedule(v1::TrainSpec::COSINE);
  if (!t.has_weight_decay()) t.set_weight_decay(0.1);
  if (!t.has_beta1()) t.set_beta1(0.9);
  if (!t.has_beta2()) t.set_beta2(0.95);
  if (!t.has_eps()) t.set_eps(1e-8);
  if (!t.has_grad_clip()) t.set_grad_clip(1.0);
  if (!t.has_seed()) t.set_seed(0);
  if (!t.has_log_every()) t.set_log_every(10);
  if (!t.has_eval_every()) t.set_eval_every(0);
  if (!t.has_eval_batches()) t.set_eval_batches(8);
  if (!t.has_progress_timeout_seconds()) t.set_progress_timeout_seconds(0);
  if (!t.has_collective_timeout_seconds()) t.set_collective_timeout_seconds(0);
}

void fill_fp8(v1::Fp8Spec& f) {
  if (f.recipe() == v1::Fp8Spec::RECIPE_UNSPECIFIED) f.set_recipe(v1::Fp8Spec::TENSORWISE);
  if (!f.has_amax_history_len()) f.set_amax_history_len(16);
  if (!f.has_pad_inner_dim()) f.set_pad_inner_dim(false);
}

void fill_checkpoint(v1::CheckpointSpec& c) {
  if (!c.has_every()) c.set_every(0);
  if (!c.has_keep()) c.set_keep(3);
}

void fill_resources(v1::ResourceSpec& r) {
  if (!r.has_world_size()) r.set_world_size(1);
  if (r.device() == v1::ResourceSpec::DEVICE_UNSPECIFIED) r.set_device(v1::ResourceSpec::CPU);
  if (!r.has_cpus_per_rank()) r.set_cpus_per_rank(1);
}

void fill_parallel(v1::ParallelSpec& p) {
  if (!p.has_tensor()) p.set_tensor(1);
}

void fill_fsdp(v1::FsdpSpec& f) {
  if (f.param_dtype() == v1::FsdpSpec::DTYPE_UNSPECIFIED) f.set_param_dtype(v1::FsdpSpec::FP32);
  if (f.reduce_dtype() == v1::FsdpSpec::DTYPE_UNSPECIFIED) f.set_reduce_dtype(v1::FsdpSpec::FP32);
}

void fill_restarts(v1::RestartPolicy& r) {
  if (!r.has_max_restarts()) r.set_max_restarts(5);
  if (!r.has_backoff_seconds()) r.set_backoff_seconds(10);
  if (r.on().empty()) {
    for (auto c : {v1::RestartPolicy::WORKER_LOST, v1::RestartPolicy::PEER_LOST, v1::RestartPolicy::SIGNAL,
                   v1::RestartPolicy::HUNG, v1::RestartPolicy::UNKNOWN}) {
      r.add_on(c);
    }
  }
}

void fill_derived(JobSpec& s) {
  if (s.has_model()) {
    v1::ModelSpec& m = *s.mutable_model();
    if (!m.has_n_kv_heads()) {
      if (auto v = derived_kv_heads(s)) m.set_n_kv_heads(*v);
    }
    if (!m.has_ffn_dim()) {
      if (auto v = derived_ffn_dim(s)) m.set_ffn_dim(*v);
    }
  }
  if (s.has_data() && !s.data().has_seq_len()) {
    if (auto v = derived_seq_len(s)) s.mutable_data()->set_seq_len(*v);
  }
  if (s.has_train() && !s.train().has_min_lr()) {
    if (auto v = derived_min_lr(s)) s.mutable_train()->set_min_lr(*v);
  }
  if (!s.fp8().has_power_of_2_scales()) s.mutable_fp8()->set_power_of_2_scales(*derived_power_of2_scales(s));
  if (!s.fp8().has_all_gather_fp8()) s.mutable_fp8()->set_all_gather_fp8(*derived_all_gather_fp8(s));
  if (!s.checkpoint().has_dir()) {
    if (auto v = derived_checkpoint_dir(s)) s.mutable_checkpoint()->set_dir(*v);
  }
}

}  // namespace

void apply_defaults(JobSpec& spec) {
  if (!spec.has_priority()) spec.set_priority(0);
  if (spec.has_model()) fill_model(*spec.mutable_model(), spec.data().tokenizer());
  if (spec.has_data()) fill_data(*spec.mutable_data());
  if (spec.has_train()) fill_train(*spec.mutable_train());
  fill_fp8(*spec.mutable_fp8());
  fill_checkpoint(*spec.mutable_checkpoint());
  fill_resources(*spec.mutable_resources());
  fill_restarts(*spec.mutable_restarts());
  fill_fsdp(*spec.mutable_fsdp());
  fill_parallel(*spec.mutable_parallel());
  fill_derived(spec);
}

void apply_default_exclude(JobSpec& spec) {
  v1::Fp8Spec& fp8 = *spec.mutable_fp8();
  fp8.clear_exclude();
  fp8.add_exclude("output");
}

void forget_derived_defaults(JobSpec& spec, std::string_view changed_path) {
  for (const DerivedDefault& d : kDerivedDefaults) {
    bool affected = false;
    for (std::string_view input : d.inputs) {
      if (input.empty()) continue;
      // Changing "model" may change "model.dim"; changing "fp8.gemms.output.weight.dtype"
      // changes what "fp8.gemms" says.
      affected = affected || is_path_or_parent(changed_path, input) || is_path_or_parent(input, changed_path);
    }
    if (affected && d.holds_derived_value(spec)) d.clear(spec);
  }
}

}  // namespace fp8::jobspec
