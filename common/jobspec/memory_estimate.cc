#include "common/jobspec/memory_estimate.h"

#include <algorithm>
#include <array>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/jobspec/fp8_recipes.h"
#include "common/jobspec/model_shapes.h"
#include "common/jobspec/module_filter.h"

namespace fp8::jobspec {

namespace {

constexpr int64_t kF32 = 4;
constexpr int64_t kFp8GemmMultiple = 16;

// Rows and columns of a 128x128 scale block (fp8.h's kScaleBlock).
constexpr int64_t kBlock = 128;

struct Shape {
  int64_t rows = 0, cols = 1;
  int64_t elements() const { return rows * cols; }
};

// The model's sizes, as the engine's LlamaConfig has them (the vocabulary padded), with
// the heads and feed-forward columns one tensor-parallel rank holds.
struct Sizes {
  int64_t vocab, dim, layers, heads, kv_heads, ffn, head_dim;
  bool tied;
  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

Sizes sizes_of(const v1::ModelSpec& m, int64_t tensor) {
  Sizes s{padded_vocabulary(m.vocab_size()), m.dim(), m.n_layers(), m.n_heads() / tensor, m.n_kv_heads() / tensor,
          m.ffn_dim() / tensor, m.dim() / m.n_heads(), m.tie_embeddings()};
  return s;
}

// A unit's parameters as FSDP groups them (parameter_hooks.h): one block's, or the root's.
std::vector<Shape> block_parameters(const Sizes& s) {
  return {{s.dim},           {s.q_dim(), s.dim}, {s.kv_dim(), s.dim}, {s.kv_dim(), s.dim}, {s.dim, s.q_dim()},
          {s.dim},           {s.ffn, s.dim},     {s.dim, s.ffn},      {s.ffn, s.dim}};
}
std::vector<Shape> root_parameters(const Sizes& s) {
  std::vector<Shape> p{{s.vocab, s.dim}, {s.dim}};
  if (!s.tied) p.push_back({s.vocab, s.dim});
  return p;
}

// Elements of one rank's shard: dim 0 split in equal, padded parts (fsdp/shard_layout.h).
int64_t shard_elements(const Shape& p, int world) { return (p.rows + world - 1) / world * p.cols; }
int64_t padded_elements(const Shape& p, int world) { return shard_elements(p, world) * world; }

// A pass's tokens: every token of the micro-batch (the attention, the split linears and the
// logits see them all), and those this rank holds between blocks (the residual stream and
// the norms): all of them, or 1/T under sequence parallelism.
struct Tokens {
  int64_t rows, seq, local;
  bool sequence_parallel() const { return local != rows * seq; }
};

Tokens tokens_of(int64_t rows, int64_t seq, int64_t sequence_ranks) {
  return {rows, seq, rows * seq / sequence_ranks};
}

// Which of one block's high-precision linear inputs its backward reads
// (Float8LinearNeeds::input_in_backward of the linears that take them): the norms' outputs
// for wq, wk, wv and for w1, w3, SwiGLU's product for w2. Only then does the block keep the
// tensor without activation checkpointing.
struct BlockInputs {
  bool attn_in = true, ffn_in = true, swiglu_out = true;
};

// A decoder block's activations, in bytes, by what they are.
struct BlockBytes {
  int64_t stats;   // both norms' inv_rms
  int64_t normed;  // one norm's output, every token (gathered under sequence parallelism)
  int64_t shard;   // one norm's output on this rank's tokens (sequence parallelism), or 0
  int64_t kept;    // what the GEMMs and the attention wrote: q, k, v, attention out and lse, mid, gate, up
  int64_t swiglu;  // SwiGLU's product
  int64_t norms() const { return stats + 2 * (normed + shard); }
  int64_t all() const { return norms() + kept + swiglu; }
};

BlockBytes block_activation_bytes(const Sizes& s, const Tokens& t, int64_t act) {
  const int64_t m = t.rows * t.seq, local = t.local;
  BlockBytes b;
  // The norms run on this rank's tokens; the column-parallel layers read every token's
  // normed values (gathered from the shards under sequence parallelism).
  b.stats = 2 * local * kF32;
  b.normed = m * s.dim * act;
  b.shard = t.sequence_parallel() ? local * s.dim * act : 0;
  b.kept = (2 * m * s.q_dim() + 2 * m * s.kv_dim() + local * s.dim + 2 * m * s.ffn) * act +
           t.rows * s.heads * t.seq * kF32;
  b.swiglu = m * s.ffn * act;
  return b;
}

// A tensor the blocks that read it in backward keep each their own of, and the others share.
int64_t own_or_shared(int64_t bytes, const std::vector<BlockInputs>& blocks, bool BlockInputs::*reads) {
  const int64_t own = std::count_if(blocks.begin(), blocks.end(), [&](const BlockInputs& b) { return b.*reads; });
  return own * bytes + (own < static_cast<int64_t>(blocks.size()) ? bytes : 0);
}

// The blocks' tensors in a training pass without activation checkpointing: each block keeps
// what its backward reads. A linear whose backward reads fp8 copies of its input leaves
// the high-precision input dead after the forward, so the blocks share it. Under sequence
// parallelism the gathered norm outputs are always shared: a block gathers its shard
// again before its backward.
int64_t unchecked_block_bytes(const BlockBytes& b, const std::vector<BlockInputs>& inputs) {
  const int64_t layers = static_cast<int64_t>(inputs.size());
  int64_t bytes = layers * (b.stats + b.kept) + own_or_shared(b.swiglu, inputs, &BlockInputs::swiglu_out);
  if (b.shard > 0) {
    return bytes + 2 * b.normed + own_or_shared(b.shard, inputs, &BlockInputs::attn_in) +
           own_or_shared(b.shard, inputs, &BlockInputs::ffn_in);
  }
  return bytes + own_or_shared(b.normed, inputs, &BlockInputs::attn_in) +
         own_or_shared(b.normed, inputs, &BlockInputs::ffn_in);
}

// Activations::create (worker/engine/model/activations.cc) for one pass. `inputs`: one
// per block, for a training pass without activation checkpointing.
int64_t activation_bytes(const Sizes& s, const Tokens& t, int64_t act, bool for_backward,
                        v1::TrainSpec::ActivationCheckpointing mode, const std::vector<BlockInputs>& inputs = {}) {
  const int64_t m = t.rows * t.seq, local = t.local;
  const BlockBytes block = block_activation_bytes(s, t, act);
  int64_t blocks = block.all();  // one set, shared by every block
  if (for_backward && mode == v1::TrainSpec::SELECTIVE) blocks = block.norms() + block.swiglu + s.layers * block.kept;
  if (for_backward && mode != v1::TrainSpec::FULL && mode != v1::TrainSpec::SELECTIVE) {
    blocks = unchecked_block_bytes(block, inputs);
  }
  int64_t bytes = blocks + (s.layers + 1) * local * s.dim * act  // the residual stream
                  + 2 * m * kF32                                  // tokens, targets
                  + local * kF32 + m * s.dim * act                // final norm
                  + m * s.vocab * kF32 + 2 * m * kF32 + kF32      // logits, their lse, the cast row amaxes, loss
                  ;
  if (t.sequence_parallel()) {
    bytes += m * s.dim * act                // the row-parallel layers' partial outputs
             + (local + m) * s.dim + 3 * kF32  // the fp8 gather's codes (one byte each), its scales
             + local * s.dim * act;            // the final norm's shard
  }
  if (!for_backward) return bytes;
  bytes += (local + m) * s.dim * act                                 // grad_hidden, grad_norm_in
           + 4 * m * kF32                                            // gradient row amaxes
           + 2 * m * s.q_dim() * act + 2 * m * s.kv_dim() * act      // grad_attn, grad_q; grad_k, grad_v
           + 3 * m * s.ffn * act                                     // grad_ffn, grad_gate, grad_up
           + m * s.vocab * kF32;                                     // grad_logits
  // grad_hidden gathered for the row-parallel layers; the norms' input gradients scattered.
  if (t.sequence_parallel()) bytes += (m + local) * s.dim * act;
  return bytes;
}

// One operand's cast in one orientation, as the layer plans it (float8/casts.cc).
struct OperandUse {
  const v1::CastConfig* cast;
  bool fp8_gemm;  // the GEMM reading it runs in fp8
};

bool same_cast(const v1::CastConfig& a, const v1::CastConfig& b) {
  return a.dtype() == b.dtype() && a.granularity() == b.granularity() && a.scaling() == b.scaling();
}

// The buffers a Float8Linear's casts of one [rows, cols] tensor hold: fp8 copies (one byte
// a value), for a GEMM that mixes fp8 with high precision a dequantized copy in the
// compute dtype, and each cast's scales, inverses and amaxes (one of each per tensor, per
// row as stored, or per column transposed).
int64_t cast_buffer_bytes(const OperandUse& as_stored, const OperandUse& transposed, int64_t rows, int64_t cols,
                        int64_t act) {
  const int64_t elements = rows * cols;
  const bool stored_fp8 = is_fp8(*as_stored.cast), transposed_fp8 = is_fp8(*transposed.cast);
  auto scales = [](const v1::CastConfig& c, int64_t count) {
    return 3 * kF32 * (c.granularity() == v1::CastConfig::AXISWISE ? count : 1);
  };
  int64_t bytes = 0;
  if (stored_fp8) bytes += elements + (as_stored.fp8_gemm ? 0 : elements * act) + scales(*as_stored.cast, rows);
  if (!transposed_fp8) return bytes;
  const bool shared = stored_fp8 && same_cast(*as_stored.cast, *transposed.cast) &&
                      as_stored.cast->granularity() == v1::CastConfig::TENSORWISE;
  if (!shared) bytes += scales(*transposed.cast, cols);
  if (transposed.fp8_gemm) return bytes + elements;  // the transposed copy
  // A mixed GEMM takes the dequantized copy as stored: the shared cast has it already when
  // the stored GEMM is mixed too.
  if (shared && !as_stored.fp8_gemm) return bytes;
  return bytes + (shared ? 0 : elements) + elements * act;
}

struct LayerCasts {
  int64_t input = 0, weight = 0, grad_output = 0, converted = 0;
};

// What one linear's casts hold, for `tokens` rows of gradient and `input_tokens` of input
// (an evaluation's batch is a whole step's, which the buffers grow to). `weight_cast_elsewhere`:
// FSDP gathers the weight in fp8, cast before the gather.
LayerCasts linear_cast_bytes(const v1::Float8Gemms& g, int64_t tokens, int64_t input_tokens, int64_t in, int64_t out,
                           int64_t act, int64_t out_act, bool weight_cast_elsewhere) {
  const std::array<GemmRef, 3> gemms = list_gemms(g);  // output, grad_input, grad_weight
  const GemmRef &output = gemms[0], &grad_input = gemms[1], &grad_weight = gemms[2];
  LayerCasts c;
  c.input = cast_buffer_bytes({output.lhs.cast, output.runs_in_fp8()}, {grad_weight.rhs.cast, grad_weight.runs_in_fp8()},
                            input_tokens, in, act);
  if (!weight_cast_elsewhere) {
    c.weight = cast_buffer_bytes({output.rhs.cast, output.runs_in_fp8()},
                               {grad_input.rhs.cast, grad_input.runs_in_fp8()}, out, in, act);
  }
  c.grad_output =
      cast_buffer_bytes({grad_input.lhs.cast, grad_input.runs_in_fp8()},
                      {grad_weight.lhs.cast, grad_weight.runs_in_fp8()}, tokens, out, act);
  // High-precision GEMMs compute in the input's dtype: a bf16 layer converts its fp32
  // weight once per forward, and a gradient of another dtype than the input's.
  const bool weight_read_as_is = (!is_fp8(*output.rhs.cast)) || (!is_fp8(*grad_input.rhs.cast));
  if (act != kF32 && weight_read_as_is) c.converted += out * in * act;
  const bool grad_read_as_is = (!is_fp8(*grad_input.lhs.cast)) || (!is_fp8(*grad_weight.lhs.cast));
  if (out_act != act && grad_read_as_is) c.converted += tokens * out * act;
  return c;
}

// Whether some operand of some GEMM is cast with block scales (the blockwise recipe).
bool uses_block_casts(const v1::Float8Gemms& g) {
  for (const GemmRef& gemm : list_gemms(g)) {
    for (const v1::CastConfig* c : {gemm.lhs.cast, gemm.rhs.cast}) {
      if (is_fp8(*c) && c->granularity() == v1::CastConfig::BLOCK) return true;
    }
  }
  return false;
}

// Whether the grad_input GEMM reads a cast of the weight of its own (Float8LinearNeeds::
// weight_codes_shared is false): FSDP's fp8 all-gather then moves those codes too, in the
// backward.
bool own_grad_input_codes(const v1::Float8Gemms& g) {
  const v1::CastConfig &a = g.output().weight(), &b = g.grad_input().weight();
  return !(same_cast(a, b) && a.granularity() != v1::CastConfig::AXISWISE);
}

// What FSDP's fp8 all-gather keeps for one weight [out, in] besides the gathered codes
// (float8/weight_scales.h, fsdp/fsdp_model.cc): each cast's amaxes, scales and inverses over
// the whole weight padded to whole shards (and, for blocks, the grad_input GEMM's transposed
// grid), the row amaxes the optimizer writes, and, where the grad_input GEMM reads codes of
// its own, the shard cast for it in the send buffer.
int64_t fp8_gather_bookkeeping_bytes(const v1::Float8Gemms& g, int64_t in, int64_t out, int world) {
  const int64_t rows_per_rank = (out + world - 1) / world, padded = rows_per_rank * world;
  auto blocks = [](int64_t n) { return (n + kBlock - 1) / kBlock; };
  auto grid = [&](int64_t rows, int64_t cols) { return blocks(rows) * ((blocks(cols) + 3) / 4 * 4); };
  auto floats = [&](const v1::CastConfig& c, int64_t axis_count) {
    if (c.granularity() == v1::CastConfig::BLOCK) return grid(padded, in);
    return c.granularity() == v1::CastConfig::AXISWISE ? axis_count : int64_t{1};
  };
  int64_t scale_floats = floats(g.output().weight(), padded);
  int64_t bytes = rows_per_rank * kF32;  // row amaxes
  if (own_grad_input_codes(g)) {
    scale_floats += floats(g.grad_input().weight(), in);
    bytes += rows_per_rank * in;
  }
  if (g.grad_input().weight().granularity() == v1::CastConfig::BLOCK) scale_floats += grid(in, out);
  return bytes + 3 * kF32 * scale_floats;
}

// Whether a linear trains in fp8 (worker/engine/model/linear_selection.cc): the recipe is
// not none, fp8.include and fp8.exclude select it, and its sizes suit fp8 GEMMs.
bool trains_in_fp8(const v1::Fp8Spec& fp8, const LinearLayer& l) {
  return fp8.recipe() != v1::Fp8Spec::NONE && is_float8_linear(fp8, l.name) &&
         (fp8.pad_inner_dim() ||
          (l.in_features % kFp8GemmMultiple == 0 && l.out_features % kFp8GemmMultiple == 0));
}

// Per block, which high-precision inputs its backward reads: those of a linear whose
// grad_weight GEMM takes its input in high precision (a high-precision layer,
// rowwise_with_gw_hp, a long form's grad_weight.input), Float8LinearNeeds::input_in_backward.
std::vector<BlockInputs> block_inputs(const v1::JobSpec& spec, const v1::Float8Gemms& gemms, int64_t tensor) {
  std::vector<BlockInputs> blocks(static_cast<size_t>(spec.model().n_layers()), BlockInputs{false, false, false});
  const bool fp8_grad_weight_input = is_fp8(gemms.grad_weight().input());
  for (const LinearLayer& l : list_linear_layers(spec.model())) {
    if (l.block < 0) continue;
    const bool reads = !fp8_grad_weight_input || !trains_in_fp8(spec.fp8(), tensor_parallel_share(l, tensor));
    BlockInputs& b = blocks[static_cast<size_t>(l.block)];
    if (l.role == "attention.wq" || l.role == "attention.wk" || l.role == "attention.wv") b.attn_in |= reads;
    if (l.role == "feed_forward.w1" || l.role == "feed_forward.w3") b.ffn_in |= reads;
    if (l.role == "feed_forward.w2") b.swiglu_out |= reads;
  }
  return blocks;
}

}  // namespace

int64_t MemoryEstimate::total_bytes() const {
  int64_t total = 0;
  for (const MemoryPart& p : parts) total += p.bytes;
  return total;
}

absl::StatusOr<MemoryEstimate> estimate_rank_memory(const v1::JobSpec& spec) {
  if (!model_shape_is_known(spec.model())) {
    return absl::InvalidArgumentError("memory estimate: the model's sizes are incomplete or out of range");
  }
  // A tensor-parallel rank holds its share of wq, wk, wv, wo, w1, w2 and w3 (and of the
  // heads' and feed-forward activations), the rest whole; FSDP shards over the ranks of
  // the data-parallel dimension (world_size / parallel.tensor). Sequence parallelism (as
  // the trainer reads it: only with T > 1) splits the residual stream's tokens too.
  const int64_t tensor = tensor_parallel_ranks(spec);
  const bool sequence_parallel = tensor > 1 && spec.parallel().sequence();
  const int64_t sequence_ranks = sequence_parallel ? tensor : 1;
  const v1::ModelSpec& model = spec.model();
  if (model.n_heads() % tensor != 0 || model.n_kv_heads() % tensor != 0 || model.ffn_dim() % tensor != 0) {
    return absl::InvalidArgumentError(
        "memory estimate: parallel.tensor does not divide the model's heads and feed-forward columns");
  }
  const Sizes s = sizes_of(spec.model(), tensor);
  const v1::TrainSpec& train = spec.train();
  const int world = std::max(1, spec.resources().world_size());
  const int shards = std::max<int>(1, world / static_cast<int>(tensor));
  const bool fsdp = shards > 1;
  const int64_t act = train.compute_dtype() == v1::TrainSpec::BF16 ? 2 : kF32;
  const int64_t accum = std::max(1, train.grad_accum());
  const int64_t micro_rows = std::max<int64_t>(1, train.batch_size() / accum), seq = spec.data().seq_len();
  const int64_t tokens = micro_rows * seq;

  std::vector<Shape> all = root_parameters(s);
  for (int64_t b = 0; b < s.layers; ++b) {
    for (const Shape& p : block_parameters(s)) all.push_back(p);
  }
  int64_t held = 0;  // fp32 elements of this rank's parameters
  for (const Shape& p : all) held += fsdp ? shard_elements(p, shards) : p.elements();

  const v1::Fp8Spec& fp8 = spec.fp8();
  const v1::Float8Gemms gemms = effective_gemms(fp8);

  MemoryEstimate e;
  e.world_size = world;
  e.tensor_parallel = static_cast<int>(tensor);
  e.sequence_parallel = sequence_parallel;
  const std::string of_what = fsdp         ? absl::StrCat("this rank's shards, 1/", shards, " of the model")
                             : tensor > 1 ? absl::StrCat("the model with 1/", tensor, " of each block's linears")
                                          : "the model";
  e.parts.push_back({"parameters", absl::StrCat("fp32 master weights, ", of_what), held * kF32});
  e.parts.push_back({"gradients", absl::StrCat("fp32, ", of_what), held * kF32});
  e.parts.push_back({"optimizer", "AdamW's two fp32 moments", 2 * held * kF32});

  const char* mode = train.activation_checkpointing() == v1::TrainSpec::FULL        ? "full"
                     : train.activation_checkpointing() == v1::TrainSpec::SELECTIVE ? "selective"
                                                                                    : "none";
  e.parts.push_back({"activations",
                     absl::StrCat("a micro-batch of ", micro_rows, " x ", seq, " tokens, ",
                                  act == kF32 ? "fp32" : "bf16", ", activation checkpointing ", mode,
                                  sequence_parallel ? absl::StrCat(", sequence-parallel (1/", tensor,
                                                                   " of the tokens between blocks)")
                                                    : ""),
                     activation_bytes(s, tokens_of(micro_rows, seq, sequence_ranks), act, /*for_backward=*/true,
                                      train.activation_checkpointing(), block_inputs(spec, gemms, tensor))});
  // The trainer evaluates at least once, after the last step, when it has validation data.
  const bool evaluates = spec.data().val_fraction() > 0 || spec.data().has_val_path();
  const int64_t eval_tokens = std::max<int64_t>(tokens, int64_t{train.batch_size()} * seq);
  if (evaluates) {
    e.parts.push_back({"evaluation", absl::StrCat("a forward of ", train.batch_size(), " x ", seq, " tokens"),
                       activation_bytes(s, tokens_of(train.batch_size(), seq, sequence_ranks), act,
                                        /*for_backward=*/false, v1::TrainSpec::FULL)});
  }

  // fp8 layers' casts.
  const bool fp8_gather = fsdp && fp8.all_gather_fp8() && weight_gathers_in_fp8(gemms);
  const bool dynamic_input = gemms.output().input().scaling() != v1::CastConfig::DELAYED &&
                             gemms.grad_weight().input().scaling() != v1::CastConfig::DELAYED;
  const bool block_casts = uses_block_casts(gemms);
  int64_t cast_bytes = 0, converted_bytes = 0, fp8_layers = 0, fp8_gather_bytes = 0;
  std::set<std::string> copied_roles;
  const v1::Float8Gemms high_precision = recipe_gemms(v1::Fp8Spec::NONE);
  for (const LinearLayer& whole : list_linear_layers(spec.model())) {
    const LinearLayer l = tensor_parallel_share(whole, tensor);
    const bool is_fp8 = trains_in_fp8(fp8, l);
    const int64_t out_act = l.role == "output" ? kF32 : act;
    const LayerCasts c = linear_cast_bytes(is_fp8 ? gemms : high_precision, tokens, evaluates ? eval_tokens : tokens,
                                         l.in_features, l.out_features, act, out_act, is_fp8 && fp8_gather);
    // wk and wv take wq's input casts, w3 takes w1's (same input, same casts), except
    // block casts, which each layer makes itself.
    const bool shares_input = is_fp8 && dynamic_input && !block_casts &&
                              (l.role == "attention.wk" || l.role == "attention.wv" || l.role == "feed_forward.w3");
    // Under full checkpointing the blocks' layers in one position share their copies
    // (float8/cast_copies.h): one block's worth of each.
    const bool shares_copies = train.activation_checkpointing() == v1::TrainSpec::FULL && l.role != "output" &&
                               !copied_roles.insert(l.role).second;
    if (!shares_copies) cast_bytes += (shares_input ? 0 : c.input) + c.weight + c.grad_output;
    // A block cast of a transposed use transposes the tensor first, through two buffers of
    // the largest such tensor (float8/casts.cc), which every layer keeps.
    if (is_fp8 && block_casts) {
      cast_bytes += 2 * std::max({(evaluates ? eval_tokens : tokens) * l.in_features * act,
                                  tokens * l.out_features * out_act, l.out_features * l.in_features * kF32});
    }
    converted_bytes += c.converted;
    fp8_layers += is_fp8 ? 1 : 0;
    if (is_fp8 && fp8_gather && !(l.role == "output" && s.tied)) {
      fp8_gather_bytes += fp8_gather_bookkeeping_bytes(gemms, l.in_features, l.out_features, shards);
    }
  }
  if (cast_bytes > 0) {
    e.parts.push_back({"fp8 casts", absl::StrCat("fp8 copies of the inputs, weights and gradients of ", fp8_layers,
                                                 " fp8 linears", fp8_gather ? " (weights cast before the gather)" : ""),
                       cast_bytes});
  }
  if (converted_bytes > 0) {
    e.parts.push_back({"bf16 copies", "weights and fp32 gradients converted for high-precision GEMMs",
                       converted_bytes});
  }
  if (tensor > 1 && !sequence_parallel && act != kF32) {
    // The ranks sum bf16 partial outputs [tokens, dim] in fp32, through a scratch of the
    // largest (engine/train/tensor_parallel_group.h); sequence parallelism reduce-scatters
    // them in bf16 instead.
    e.parts.push_back({"TP bf16 sums", "partial outputs widened to fp32 for the tensor-parallel all-reduce",
                       (evaluates ? eval_tokens : tokens) * s.dim * kF32});
  }

  if (fsdp) {
    // The root stays gathered (and, in the backward, its full gradients) for the whole
    // micro-batch; a block is gathered with the next one prefetched, and in its backward
    // also holds its full gradients and its reduce-scatter's buffer.
    // fsdp.param_dtype bf16: a parameter lands in bf16 before it is widened to fp32;
    // fsdp.reduce_dtype bf16: the gradients are rounded to bf16 for their reduce-scatter.
    const int64_t param_wire = spec.fsdp().param_dtype() == v1::FsdpSpec::BF16 ? 2 : 0;
    const int64_t reduce_wire = spec.fsdp().reduce_dtype() == v1::FsdpSpec::BF16 ? 2 : 0;
    const bool own_codes = own_grad_input_codes(gemms);
    const bool recomputes = train.activation_checkpointing() == v1::TrainSpec::FULL;
    auto gathered = [&](const std::vector<Shape>& unit, bool fp8_weights, bool for_backward) {
      int64_t bytes = 0;
      for (const Shape& p : unit) {
        const bool weight = p.cols > 1;
        const bool as_fp8 = fp8_weights && weight && fp8_gather;
        // fp8: the codes, and in the backward their transpose (and, where the grad_input
        // GEMM reads codes of its own and full checkpointing runs the forward again, both).
        const int64_t fp8_copies = !for_backward ? 1 : own_codes && recomputes ? 3 : 2;
        bytes += as_fp8 ? padded_elements(p, shards) * fp8_copies : padded_elements(p, shards) * (kF32 + param_wire);
      }
      return bytes;
    };
    auto full_grads = [&](const std::vector<Shape>& unit) {
      int64_t elements = 0;
      for (const Shape& p : unit) elements += padded_elements(p, shards);
      return elements * (kF32 + reduce_wire);
    };
    const bool output_fp8 = fp8.recipe() != v1::Fp8Spec::NONE && is_float8_linear(fp8, "output");
    const std::vector<Shape> root = root_parameters(s), block = block_parameters(s);
    const int64_t root_bytes = gathered(root, output_fp8, true) + full_grads(root);
    const int64_t block_bytes =
        gathered(block, true, true) + gathered(block, true, false) + 2 * full_grads(block);
    // Each unit's reduce-scatter lands in a shard-sized buffer of its own, added into the
    // shard gradients once the micro-batch's backward is done: a second set of gradient
    // shards (FSDP's packed collectives, the default; a parameter at a time the step's first
    // micro-batch reduces into the gradients directly).
    e.parts.push_back({"FSDP gathers",
                       "the root unit (embeddings, final norm, output) and its full gradients; two blocks in flight "
                       "with one block's full gradients and reduce-scatter buffer; every unit's reduced gradient shard",
                       root_bytes + block_bytes + held * kF32});
    if (fp8_gather_bytes > 0) {
      e.parts.push_back({"FSDP fp8 scales", "the fp8-gathered weights' amaxes and scales, row amaxes and send copies",
                         fp8_gather_bytes});
    }
    if (fp8_gather && gemms.output().weight().granularity() == v1::CastConfig::BLOCK) {
      // A block-scaled shard that does not start and end on 128-row blocks is cast through
      // a copy of it padded to whole blocks (float8/weight_scales.h), fp32 and fp8, kept
      // at the largest: at most its rows' blocks and one more.
      int64_t staging = 0;
      for (const Shape& p : block) {
        const int64_t rows_per_rank = (p.rows + shards - 1) / shards;
        if (p.cols <= 1 || rows_per_rank % kBlock == 0) continue;
        staging = std::max(staging, (rows_per_rank / kBlock + 2) * kBlock * p.cols * (kF32 + 1));
      }
      if (staging > 0) {
        e.parts.push_back({"FSDP block staging", "a block-scaled shard padded to whole 128-row blocks for its cast",
                           staging});
      }
    }
    if (param_wire > 0) {
      // The shards that travel in bf16 are rounded into a send buffer of their own (counted
      // for every shard: those gathered in fp8 send their codes instead, a little less).
      e.parts.push_back({"FSDP bf16", "this rank's shards rounded to bf16 to send (fsdp.param_dtype)",
                         held * param_wire});
    }
  }
  return e;
}

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return absl::StrFormat("%.2f GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return absl::StrFormat("%.1f MiB", b / (1024.0 * 1024));
  return absl::StrFormat("%.1f KiB", b / 1024.0);
}

std::string format_memory_estimate(const MemoryEstimate& e) {
  std::string out = absl::StrCat("memory per rank (estimate, ", e.world_size, e.world_size == 1 ? " rank" : " ranks",
                                 e.tensor_parallel > 1
                                     ? absl::StrCat(", ", e.tensor_parallel, "-way tensor-parallel",
                                                    e.sequence_parallel ? " and sequence-parallel" : "")
                                     : std::string(),
                                 "): ", format_bytes(e.total_bytes()), "\n");
  for (const MemoryPart& p : e.parts) {
    absl::StrAppend(&out, absl::StrFormat("  %-12s %10s  %s\n", p.name, format_bytes(p.bytes), p.detail));
  }
  return out;
}

}  // namespace fp8::jobspec
