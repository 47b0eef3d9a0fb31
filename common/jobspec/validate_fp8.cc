#include "common/jobspec/validate_fp8.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/fp8_recipes.h"
#include "common/jobspec/issues.h"
#include "common/jobspec/model_shapes.h"
#include "common/jobspec/module_filter.h"
#include "common/jobspec/scalars.h"
#include "common/jobspec/suggest.h"

namespace fp8::jobspec {
namespace {

using v1::CastConfig;

// fp8 GEMMs (cuBLASLt, and the CPU path that keeps the same contract) need the contracted
// and output dimensions to be multiples of this.
constexpr int64_t kFp8GemmMultiple = 16;
// Block-scaled GEMMs step both operands' scales along K by whole 128-wide blocks.
constexpr int64_t kBlockMultiple = 128;
// Filters are short lists of short globs; the bound keeps "every glob against every
// layer" cheap on any input.
constexpr int kMaxGlobs = 64;
constexpr size_t kMaxGlobChars = 128;

// Where a problem with the set of fp8 layers is shown: the filter if the user wrote one,
// else the recipe, else the model size that produced the bad shapes.
const std::vector<std::string> kFp8LayerAnchors = {"fp8.include", "fp8.exclude", "fp8.recipe", "model.dim"};

void check_long_form(const v1::Fp8Spec& fp8, Checks& c) {
  if (!fp8.has_gemms()) return;
  if (fp8.recipe() == v1::Fp8Spec::NONE) {
    c.add("fp8.gemms", "has no effect with fp8.recipe none; name the recipe these changes apply to");
    return;
  }
  for (const GemmRef& gemm : list_gemms(fp8.gemms())) {
    for (const OperandRef* op : {&gemm.lhs, &gemm.rhs}) {
      if (op->cast->dtype() != CastConfig::HIGH_PRECISION) continue;
      if (op->cast->granularity() != CastConfig::GRANULARITY_UNSPECIFIED) {
        c.add(op->path + ".granularity", "has no effect on a high_precision operand");
      }
      if (op->cast->scaling() != CastConfig::SCALING_UNSPECIFIED) {
        c.add(op->path + ".scaling", "has no effect on a high_precision operand");
      }
    }
  }
}

// `tensor_parallel_alone` (tensor parallelism without FSDP): fp8.all_gather_fp8 is
// check_fp8's.
void check_effective_gemms(const v1::Fp8Spec& fp8, const v1::Float8Gemms& effective, bool tensor_parallel_alone,
                           Checks& c) {
  for (const GemmRef& gemm : list_gemms(effective)) {
    if (gemm.lhs.cast->dtype() == CastConfig::E5M2 && gemm.rhs.cast->dtype() == CastConfig::E5M2) {
      c.add(gemm.path, "e5m2 x e5m2 has no fp8 GEMM kernel; make one operand e4m3", {"fp8.recipe"});
    }
    for (const OperandRef* op : {&gemm.lhs, &gemm.rhs}) {
      if (op->cast->scaling() == CastConfig::DELAYED && (op->cast->granularity() == CastConfig::AXISWISE ||
                                                          op->cast->granularity() == CastConfig::BLOCK)) {
        c.add(op->path,
              "delayed scaling keeps one amax history per tensor, so it needs tensorwise granularity",
              {"fp8.recipe"});
      }
    }
    // The block-scaled GEMM takes block scales on both operands (fp8.h's ScaledGemmArgs),
    // and the engine has no dequantized copy of a block cast for a mixed GEMM.
    const bool lhs_block = is_block(*gemm.lhs.cast), rhs_block = is_block(*gemm.rhs.cast);
    if (lhs_block != rhs_block) {
      const OperandRef& block = lhs_block ? gemm.lhs : gemm.rhs;
      const OperandRef& other = lhs_block ? gemm.rhs : gemm.lhs;
      c.add(other.path,
            absl::StrCat("must be fp8 with granularity block too: ", block.path,
                         " is block-scaled, and a block-scaled GEMM needs block scales on both operands"),
            {"fp8.recipe"});
    }
  }
  if (fp8.all_gather_fp8() && fp8.recipe() != v1::Fp8Spec::NONE && !tensor_parallel_alone &&
      !weight_gathers_in_fp8(effective)) {
    c.add("fp8.all_gather_fp8",
          "needs both GEMMs that read the weight (output and grad_input) to run in fp8 (set it to false for these "
          "gemms)");
  }
}

// Every glob must name at least one layer: a misspelt exclude would otherwise silently
// train the layer it meant to protect in fp8.
void check_filter_globs(const v1::Fp8Spec& fp8, const std::vector<LinearLayer>& layers, Checks& c) {
  std::vector<std::string> names_for_hints;
  for (const LinearLayer& l : layers) {
    if (l.block <= 0) names_for_hints.push_back(l.name);
  }
  auto check_list = [&](const std::string& field,
                        const google::protobuf::RepeatedPtrField<std::string>& globs) {
    if (globs.size() > kMaxGlobs) {
      c.add(field, absl::StrCat("has ", globs.size(), " globs; at most ", kMaxGlobs));
      return;
    }
    for (int i = 0; i < globs.size(); ++i) {
      std::string at = absl::StrCat(field, "[", i, "]");
      const std::string& glob = globs.Get(i);
      if (glob.empty() || glob.size() > kMaxGlobChars) {
        c.add(at, absl::StrCat("globs are 1 to ", kMaxGlobChars, " characters"));
        continue;
      }
      if (layers.empty()) continue;  // model sizes are wrong; reported elsewhere
      bool matched = false;
      for (const LinearLayer& l : layers) matched = matched || glob_matches(glob, l.name);
      if (!matched) {
        c.add(at, absl::StrCat(
                      quote(glob), " matches no linear layer", did_you_mean(glob, names_for_hints),
                      "; layers are named like layers.0.attention.wq, layers.0.feed_forward.w1, output"));
      }
    }
  };
  check_list("fp8.include", fp8.include());
  check_list("fp8.exclude", fp8.exclude());
}

void check_layer_shapes(const v1::JobSpec& spec, const v1::Float8Gemms& effective,
                      const std::vector<LinearLayer>& layers, Checks& c) {
  const v1::Fp8Spec& fp8 = spec.fp8();
  if (fp8.pad_inner_dim() && spec.resources().device() == v1::ResourceSpec::CUDA) {
    c.add("fp8.pad_inner_dim",
          "is not available on cuda: cuBLASLt's fp8 GEMMs take only dimensions that are multiples of 16 and "
          "nothing pads them there; leave it out and keep such layers in high precision with fp8.exclude",
          {"resources.device"});
    return;
  }
  if (fp8.pad_inner_dim()) return;
  // What to do about a shape: pad_inner_dim exists on the CPU only.
  const std::string fix = spec.resources().device() == v1::ResourceSpec::CUDA
                              ? "keep such layers in high precision with fp8.exclude"
                              : "set fp8.pad_inner_dim: true (CPU only), or keep such layers in high precision with "
                                "fp8.exclude";
  // output = in·wᵀ contracts in_features; grad_input = gout·w contracts out_features;
  // grad_weight = goutᵀ·in contracts tokens and yields [out, in].
  const std::array<GemmRef, 3> gemms = list_gemms(effective);
  // Block-scaled GEMMs need multiples of 128 instead (check_block_scaling).
  auto checked_here = [](const GemmRef& g) { return g.runs_in_fp8() && !is_block(*g.lhs.cast); };
  const bool output_fp8 = checked_here(gemms[0]);
  const bool grad_input_fp8 = checked_here(gemms[1]);
  const bool grad_weight_fp8 = checked_here(gemms[2]);
  const bool needs_in = output_fp8 || grad_input_fp8 || grad_weight_fp8;
  const bool needs_out = output_fp8 || grad_input_fp8;

  // One line for all of them: they share one cause (the model's sizes) and one fix. It
  // names one layer of each distinct shape, which is all there is to see.
  int offenders = 0;
  std::vector<const LinearLayer*> examples;  // the first offender of each shape
  bool any_fp8_layer = false;
  for (const LinearLayer& layer : layers) {
    if (!is_float8_linear(fp8, layer.name)) continue;
    any_fp8_layer = true;
    bool bad_in = needs_in && layer.in_features % kFp8GemmMultiple != 0;
    bool bad_out = needs_out && layer.out_features % kFp8GemmMultiple != 0;
    if (!bad_in && !bad_out) continue;
    ++offenders;
    bool new_shape = std::none_of(examples.begin(), examples.end(), [&](const LinearLayer* e) {
      return e->in_features == layer.in_features && e->out_features == layer.out_features;
    });
    if (new_shape) examples.push_back(&layer);
  }
  if (offenders > 0) {
    std::vector<std::string> shown;
    for (const LinearLayer* e : examples) {
      shown.push_back(absl::StrCat(e->name, " (", e->in_features, " -> ", e->out_features, ")"));
    }
    std::string what = offenders == 1 ? absl::StrCat("fp8 layer ", shown[0], " has dimensions")
                                      : absl::StrCat(offenders, " fp8 layers, such as ",
                                                     absl::StrJoin(shown, ", "), ", have dimensions");
    c.add("fp8",
          absl::StrCat(what,
                       " (in_features -> out_features) that are not all multiples of 16, as fp8 GEMMs need; ",
                       fix),
          kFp8LayerAnchors);
  }

  // grad_weight contracts over the tokens of a micro-batch.
  const v1::TrainSpec& t = spec.train();
  if (!any_fp8_layer || !grad_weight_fp8 || t.grad_accum() <= 0 || t.batch_size() <= 0 ||
      t.batch_size() % t.grad_accum() != 0 || spec.data().seq_len() <= 0) {
    return;
  }
  int64_t sequences = t.batch_size() / t.grad_accum();
  int64_t tokens = sequences * spec.data().seq_len();
  if (tokens % kFp8GemmMultiple != 0) {
    c.add("train.batch_size",
          absl::StrCat("a micro-batch holds ", sequences, " x ", spec.data().seq_len(), " = ", tokens,
                       " tokens, not a multiple of 16, which the fp8 grad_weight GEMM contracts over; change "
                       "train.batch_size, train.grad_accum or data.seq_len",
                       spec.resources().device() == v1::ResourceSpec::CUDA
                           ? ""
                           : ", or set fp8.pad_inner_dim: true (CPU only)"),
          {"data.seq_len", "train.grad_accum"});
  }
}

// Block scaling (CastConfig.BLOCK): each block-scaled GEMM needs its contracted dimension a
// multiple of 128 (no padding path exists for it: pad_inner_dim does not apply), on every
// device.
void check_block_scaling(const v1::JobSpec& spec, const v1::Float8Gemms& effective,
                         const std::vector<LinearLayer>& layers, Checks& c) {
  const v1::Fp8Spec& fp8 = spec.fp8();
  const std::array<GemmRef, 3> gemms = list_gemms(effective);
  const bool output_block = is_block(*gemms[0].lhs.cast) && is_block(*gemms[0].rhs.cast);
  const bool grad_input_block = is_block(*gemms[1].lhs.cast) && is_block(*gemms[1].rhs.cast);
  const bool grad_weight_block = is_block(*gemms[2].lhs.cast) && is_block(*gemms[2].rhs.cast);
  if (!output_block && !grad_input_block && !grad_weight_block) return;
  const std::string what = fp8.recipe() == v1::Fp8Spec::BLOCKWISE ? "recipe blockwise" : "granularity block";
  // output = in·wᵀ contracts in_features; grad_input = gout·w contracts out_features.
  int offenders = 0;
  bool any_fp8_layer = false;
  std::vector<std::string> shown;  // one layer of each distinct shape
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const LinearLayer& layer : layers) {
    if (!is_float8_linear(fp8, layer.name)) continue;
    any_fp8_layer = true;
    const bool bad_in = output_block && layer.in_features % kBlockMultiple != 0;
    const bool bad_out = grad_input_block && layer.out_features % kBlockMultiple != 0;
    if (!bad_in && !bad_out) continue;
    ++offenders;
    const std::pair<int64_t, int64_t> shape{layer.in_features, layer.out_features};
    if (std::find(shapes.begin(), shapes.end(), shape) != shapes.end()) continue;
    shapes.push_back(shape);
    shown.push_back(absl::StrCat(layer.name, " (", layer.in_features, " -> ", layer.out_features, ")"));
  }
  if (offenders > 0) {
    const std::string which = offenders == 1 ? absl::StrCat("fp8 layer ", shown[0], " has dimensions")
                                             : absl::StrCat(offenders, " fp8 layers, such as ",
                                                            absl::StrJoin(shown, ", "), ", have dimensions");
    c.add("fp8",
          absl::StrCat(what, " needs every fp8 layer's in_features and out_features to be multiples of 128 (the "
                       "block-scaled GEMMs contract over them in 128-wide blocks), but ", which,
                       " (in_features -> out_features) that are not; make model.dim, model.ffn_dim and the heads' "
                       "widths multiples of 128, keep such layers in high precision with fp8.exclude, or choose "
                       "another recipe"),
          kFp8LayerAnchors);
  }
  const v1::TrainSpec& t = spec.train();
  if (!any_fp8_layer || !grad_weight_block || t.grad_accum() <= 0 || t.batch_size() <= 0 ||
      t.batch_size() % t.grad_accum() != 0 || spec.data().seq_len() <= 0) {
    return;
  }
  const int64_t sequences = t.batch_size() / t.grad_accum();
  const int64_t tokens = sequences * spec.data().seq_len();
  if (tokens % kBlockMultiple != 0) {
    c.add("train.batch_size",
          absl::StrCat("a micro-batch holds ", sequences, " x ", spec.data().seq_len(), " = ", tokens,
                       " tokens, not a multiple of 128, which the block-scaled grad_weight GEMM of ", what,
                       " contracts over in 128-wide blocks; change train.batch_size, train.grad_accum or data.seq_len"),
          {"data.seq_len", "train.grad_accum"});
  }
}

// Tensor parallelism (parallel.tensor > 1): each rank's share of a split layer
// (tensor_parallel_share) against what its fp8 GEMMs need. A whole
// layer's own sizes are check_layer_shapes' and check_block_scaling's; here only what
// the split breaks.
void check_tensor_parallel(const v1::JobSpec& spec, const v1::Float8Gemms& effective,
                           const std::vector<LinearLayer>& layers, Checks& c) {
  const int64_t tensor = tensor_parallel_ranks(spec);
  const v1::Fp8Spec& fp8 = spec.fp8();
  const std::vector<std::string> at_tensor = {"parallel.tensor"};
  // Uneven splits are check_parallel's.
  const v1::ModelSpec& m = spec.model();
  if (m.n_heads() % tensor != 0 || m.n_kv_heads() % tensor != 0 || m.ffn_dim() % tensor != 0) return;
  // The GEMMs' needs, as check_layer_shapes and check_block_scaling read them: which
  // dimension must be a multiple of what.
  const std::array<GemmRef, 3> gemms = list_gemms(effective);
  const bool output_block = is_block(*gemms[0].lhs.cast) && is_block(*gemms[0].rhs.cast);
  const bool grad_input_block = is_block(*gemms[1].lhs.cast) && is_block(*gemms[1].rhs.cast);
  auto checked16 = [&](const GemmRef& g) { return g.runs_in_fp8() && !is_block(*g.lhs.cast); };
  const bool pad = fp8.pad_inner_dim();
  const bool in16 = !pad && (checked16(gemms[0]) || checked16(gemms[1]) || checked16(gemms[2]));
  const bool out16 = !pad && (checked16(gemms[0]) || checked16(gemms[1]));

  // The model size each split dimension comes from, in the order messages list them.
  const int64_t head_dim = m.n_heads() > 0 ? m.dim() / m.n_heads() : 0;
  auto source = [&](const std::string& role) -> int {
    if (role == "attention.wq" || role == "attention.wo") return 0;
    if (role == "attention.wk" || role == "attention.wv") return 1;
    return 2;
  };
  const std::array<std::string, 3> shown = {
      absl::StrCat("model.n_heads x head_dim (", m.n_heads(), " x ", head_dim, " / ", tensor, " = ",
                   m.n_heads() * head_dim / tensor, ")"),
      absl::StrCat("model.n_kv_heads x head_dim (", m.n_kv_heads(), " x ", head_dim, " / ", tensor, " = ",
                   m.n_kv_heads() * head_dim / tensor, ")"),
      absl::StrCat("model.ffn_dim (", m.ffn_dim(), " / ", tensor, " = ", m.ffn_dim() / tensor, ")")};
  std::array<bool, 3> bad16{}, bad128{};
  for (const LinearLayer& layer : layers) {
    if (layer.block < 0 || !is_float8_linear(fp8, layer.name)) continue;
    const LinearLayer share = tensor_parallel_share(layer, tensor);
    const bool split_in = share.in_features != layer.in_features;
    const int64_t whole = split_in ? layer.in_features : layer.out_features;
    const int64_t part = split_in ? share.in_features : share.out_features;
    auto broken = [&](int64_t multiple) { return whole % multiple == 0 && part % multiple != 0; };
    if ((split_in ? in16 : out16) && broken(kFp8GemmMultiple)) bad16[source(layer.role)] = true;
    if ((split_in ? output_block : grad_input_block) && broken(kBlockMultiple)) bad128[source(layer.role)] = true;
  }
  auto report = [&](const std::array<bool, 3>& bad, int64_t multiple, const std::string& need,
                    const std::string& fix) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < bad.size(); ++i) {
      if (bad[i]) parts.push_back(shown[i]);
    }
    if (parts.empty()) return;
    c.add("parallel.tensor",
          absl::StrCat(tensor, " gives each tensor-parallel rank a share of ", absl::StrJoin(parts, " and of "),
                       parts.size() == 1 ? " that is not a multiple of " : " that are not multiples of ", multiple,
                       ", as ", need, "; ", fix),
          at_tensor);
  };
  const bool cuda = spec.resources().device() == v1::ResourceSpec::CUDA;
  report(bad16, kFp8GemmMultiple, "fp8 GEMMs need",
         absl::StrCat("choose another parallel.tensor or model size, ",
                      cuda ? "" : "set fp8.pad_inner_dim: true (CPU only), ",
                      "or keep such layers in high precision with fp8.exclude"));
  report(bad128, kBlockMultiple,
         absl::StrCat(fp8.recipe() == v1::Fp8Spec::BLOCKWISE ? "recipe blockwise's" : "granularity block's",
                      " block-scaled GEMMs need (they contract in 128-wide blocks)"),
         "choose another parallel.tensor or model size, keep such layers in high precision with fp8.exclude, or "
         "choose another recipe");
}

bool has_delayed_cast(const v1::Float8Gemms& effective) {
  for (const GemmRef& gemm : list_gemms(effective)) {
    for (const OperandRef* op : {&gemm.lhs, &gemm.rhs}) {
      if (op->cast->dtype() != CastConfig::HIGH_PRECISION && op->cast->scaling() == CastConfig::DELAYED) return true;
    }
  }
  return false;
}

// The coordinator checks that the job exists, is the submitter's and trains the same
// model; here only what the spec alone decides.
void check_amax_init_from(const v1::Fp8Spec& fp8, Checks& c) {
  if (fp8.amax_init_from().empty()) return;
  const std::string& id = fp8.amax_init_from();
  const bool job_id = absl::StartsWith(id, "job-") && id.size() > 4 &&
                      std::all_of(id.begin() + 4, id.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!job_id) {
    const std::string shown = id.size() <= 32 ? id : id.substr(0, 32) + "...";
    c.add("fp8.amax_init_from", absl::StrCat("expected a job id such as job-12, got '", shown, "'"));
    return;
  }
  if (fp8.recipe() == v1::Fp8Spec::NONE || !has_delayed_cast(effective_gemms(fp8))) {
    c.add("fp8.amax_init_from",
          "only delayed scaling keeps amax histories to start from; set fp8.recipe: delayed or leave this out",
          {"fp8.recipe"});
  }
}

}  // namespace

void check_fp8(const v1::JobSpec& spec, Checks& c) {
  const v1::Fp8Spec& fp8 = spec.fp8();
  c.int_in_range("fp8.amax_history_len", fp8.amax_history_len(), 1, 4096);
  check_long_form(fp8, c);
  check_amax_init_from(fp8, c);
  const int64_t tensor = tensor_parallel_ranks(spec);
  if (tensor > 1 && fp8.all_gather_fp8()) {
    if (data_parallel_ranks(spec) == 1) {
      c.add("fp8.all_gather_fp8",
            absl::StrCat("has nothing to gather with resources.world_size equal to parallel.tensor (", tensor,
                         "): there is no FSDP, each rank holds its share of every weight whole; leave it out or "
                         "set it to false"),
            {"parallel.tensor"});
    }
  }
  if (fp8.recipe() == v1::Fp8Spec::NONE) return;  // nothing below applies without fp8

  v1::Float8Gemms effective = effective_gemms(fp8);
  check_effective_gemms(fp8, effective, tensor > 1 && data_parallel_ranks(spec) == 1, c);
  std::vector<LinearLayer> layers = list_linear_layers(spec.model());
  check_filter_globs(fp8, layers, c);
  check_layer_shapes(spec, effective, layers, c);
  check_block_scaling(spec, effective, layers, c);
  if (tensor > 1) check_tensor_parallel(spec, effective, layers, c);
}

}  // namespace fp8::jobspec
