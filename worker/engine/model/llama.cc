#include "worker/engine/model/llama.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/engine/model/delayed_step.h"
#include "worker/engine/status_macros.h"

namespace fp8::engine {

namespace {

// One cast of a normed input serves every projection that reads it: each layer of
// `readers` (in the order the forward runs them) takes the casts of the first earlier one
// that casts its input alike and casts for itself. Bit for bit the same results, with two
// or three casts fewer per block; a layer the module filter casts differently casts its own.
void share_input_casts(std::initializer_list<LinearUnit*> readers) {
  std::vector<const LinearUnit*> sources;
  for (LinearUnit* u : readers) {
    const auto source = std::find_if(sources.begin(), sources.end(),
                                     [&](const LinearUnit* s) { return u->layer->share_input_casts_from(*s->layer); });
    if (source == sources.end()) sources.push_back(u);
  }
}

// fp32 tensors (parameters, inv_rms, logits, loss) and activations (of the config's type).
float* f(const Tensor& t) { return t.data<float>(); }
void* act(const Tensor& t) { return t.raw(); }

// Checked here, on the host, for every device: a GPU kernel cannot reject a bad id
// before it runs without stalling the stream (model_ops.h).
absl::Status check_ids(const char* what, const std::vector<int32_t>& ids, int64_t vocab, bool allow_ignore) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if ((id >= 0 && id < vocab) || (allow_ignore && id == kIgnoreTarget)) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("model: ", what, " ", id, " at position ", i, " is outside the vocabulary of ", vocab));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const Device& device, const LlamaConfig& config,
                                                               const v1::Fp8Spec& fp8, uint64_t seed,
                                                               ParameterStorage storage,
                                                               TensorParallelComm* tensor_parallel) {
  FP8_ASSIGN_OR_RETURN(ModelOps * ops, device.model_ops());
  LlamaConfig c = config;
  c.tensor_parallel = tensor_parallel != nullptr ? tensor_parallel->size() : 1;
  if (c.tensor_parallel > 1) {
    if (c.n_heads % c.tensor_parallel != 0 || c.n_kv_heads % c.tensor_parallel != 0 ||
        c.ffn_dim % c.tensor_parallel != 0) {
      return absl::InvalidArgumentError(absl::StrCat("model: n_heads ", c.n_heads, ", n_kv_heads ", c.n_kv_heads,
                                                     " and ffn_dim ", c.ffn_dim, " must each divide by ",
                                                     c.tensor_parallel, " tensor-parallel ranks"));
    }
  }
  if (c.sequence_parallel && c.tensor_parallel < 2) {
    return absl::InvalidArgumentError("model: sequence parallelism needs tensor parallelism");
  }
  std::unique_ptr<LlamaModel> model(new LlamaModel(device, *ops, c, seed));
  model->tp_ = c.tensor_parallel > 1 ? tensor_parallel : nullptr;
  FP8_RETURN_IF_ERROR(model->build(fp8, storage));
  return model;
}

absl::Status LlamaModel::build(const v1::Fp8Spec& fp8, ParameterStorage storage) {
  const LlamaConfig& c = config_;
  const int64_t q_dim = c.n_heads * c.head_dim(), kv_dim = c.n_kv_heads * c.head_dim();
  Backend& backend = device_.backend();
  auto matrix = [&](std::string name, int64_t out, int64_t in, ParameterInit init) {
    return params_.add(device_, std::move(name), {out, in}, init, /*weight_decay=*/true, storage);
  };
  // Under tensor parallelism this rank's rows (column-parallel) or columns (row-parallel).
  const int parts = static_cast<int>(c.tensor_parallel);
  auto split_matrix = [&](std::string name, int64_t out, int64_t in, ParameterInit init,
                          int axis) -> absl::StatusOr<Parameter*> {
    if (parts == 1) return matrix(std::move(name), out, in, init);
    FP8_ASSIGN_OR_RETURN(Parameter * p, matrix(std::move(name), axis == 0 ? out / parts : out,
                                               axis == 1 ? in / parts : in, init));
    p->split = ParameterSplit{axis, tp_->rank(), parts};
    return p;
  };
  auto gain = [&](std::string name) {
    return params_.add(device_, std::move(name), {c.dim}, ParameterInit::kOnes, /*weight_decay=*/false, storage);
  };
  // Under full activation checkpointing a block's fp8 casts live from its recomputed
  // forward to the end of its backward, one block at a time: the blocks' layers in one
  // position (every wq, every wk, ...) share their cast copies (float8/cast_copies.h).
  std::map<std::string, SharedCastCopies> copies_by_position;
  auto linear = [&](LinearUnit& unit, const std::string& name, int64_t out, int64_t in, ParameterInit init,
                    int split_axis) -> absl::Status {
    FP8_ASSIGN_OR_RETURN(Parameter * weight, split_matrix(name, out, in, init, split_axis));
    SharedCastCopies* shared = nullptr;
    if (c.checkpointing == ActivationCheckpointing::kFull) {
      const std::string position = name.substr(name.find('.', name.find('.') + 1) + 1);  // "attention.wq"
      shared = &copies_by_position.try_emplace(position, backend).first->second;
    }
    FP8_ASSIGN_OR_RETURN(unit, make_linear_unit(backend, fp8, name, weight, {c.activations, c.activations}, shared));
    return absl::OkStatus();
  };

  const int64_t padding_rows = c.padded_vocab() - c.vocab_size;
  FP8_ASSIGN_OR_RETURN(embeddings_, matrix("tok_embeddings", c.padded_vocab(), c.dim, ParameterInit::kNormal));
  embeddings_->padding_rows = padding_rows;
  blocks_.resize(static_cast<size_t>(c.n_layers));
  for (int64_t i = 0; i < c.n_layers; ++i) {
    TransformerBlock& b = blocks_[static_cast<size_t>(i)];
    const std::string p = absl::StrCat("layers.", i, ".");
    FP8_ASSIGN_OR_RETURN(b.attention_norm, gain(p + "attention_norm"));
    constexpr int kColumnParallel = 0, kRowParallel = 1;  // the weight's split axis
    FP8_RETURN_IF_ERROR(linear(b.wq, p + "attention.wq", q_dim, c.dim, ParameterInit::kNormal, kColumnParallel));
    FP8_RETURN_IF_ERROR(linear(b.wk, p + "attention.wk", kv_dim, c.dim, ParameterInit::kNormal, kColumnParallel));
    FP8_RETURN_IF_ERROR(linear(b.wv, p + "attention.wv", kv_dim, c.dim, ParameterInit::kNormal, kColumnParallel));
    FP8_RETURN_IF_ERROR(
        linear(b.wo, p + "attention.wo", c.dim, q_dim, ParameterInit::kScaledNormal, kRowParallel));
    FP8_ASSIGN_OR_RETURN(b.ffn_norm, gain(p + "ffn_norm"));
    FP8_RETURN_IF_ERROR(
        linear(b.w1, p + "feed_forward.w1", c.ffn_dim, c.dim, ParameterInit::kNormal, kColumnParallel));
    FP8_RETURN_IF_ERROR(
        linear(b.w2, p + "feed_forward.w2", c.dim, c.ffn_dim, ParameterInit::kScaledNormal, kRowParallel));
    FP8_RETURN_IF_ERROR(
        linear(b.w3, p + "feed_forward.w3", c.ffn_dim, c.dim, ParameterInit::kNormal, kColumnParallel));
    b.tp = tp_;
    b.backend = &backend;
    share_input_casts({&b.wq, &b.wk, &b.wv});
    share_input_casts({&b.w1, &b.w3});
    for (LinearUnit* u : {&b.wq, &b.wk, &b.wv, &b.wo, &b.w1, &b.w3, &b.w2}) mutable_linears_.push_back(u);
  }
  FP8_ASSIGN_OR_RETURN(final_norm_, gain("norm"));
  // The output projection reads activations and writes fp32 logits: the loss and its
  // gradient stay fp32 whatever the activations.
  const LinearActivations to_logits{c.activations, DType::kFloat32};
  if (c.tie_embeddings) {
    FP8_ASSIGN_OR_RETURN(output_, make_linear_unit(backend, fp8, "output", embeddings_, to_logits));
  } else {
    FP8_ASSIGN_OR_RETURN(Parameter * weight, matrix("output", c.padded_vocab(), c.dim, ParameterInit::kNormal));
    weight->padding_rows = padding_rows;
    FP8_ASSIGN_OR_RETURN(output_, make_linear_unit(backend, fp8, "output", weight, to_logits));
  }
  mutable_linears_.push_back(&output_);
  linears_.assign(mutable_linears_.begin(), mutable_linears_.end());
  if (tp_ != nullptr) FP8_RETURN_IF_ERROR(prepare_split_weight_amaxes());
  if (c.sequence_parallel) {
    // Applied to this rank's tokens only. The embedding's gradient is whole on each rank
    // instead: its backward reads every token (as the output projection does, which may
    // share its weight).
    final_norm_->grad_summed_across_tensor_parallel = true;
    for (TransformerBlock& b : blocks_) {
      b.attention_norm->grad_summed_across_tensor_parallel = true;
      b.ffn_norm->grad_summed_across_tensor_parallel = true;
    }
  }
  if (storage == ParameterStorage::kDeferred) return absl::OkStatus();
  return init_parameters(params_, seed_, c.n_layers);
}

absl::Status LlamaModel::prepare_split_weight_amaxes() {
  int64_t total = 0;
  split_weight_amaxes_by_block_.resize(blocks_.size());
  for (size_t b = 0; b < blocks_.size(); ++b) {
    SplitWeightAmaxes& block = split_weight_amaxes_by_block_[b];
    block.offset = total;
    TransformerBlock& blk = blocks_[b];
    std::vector<LinearUnit*> cast_here;
    for (LinearUnit* u : {&blk.wq, &blk.wk, &blk.wv, &blk.wo, &blk.w1, &blk.w3, &blk.w2}) {
      const Float8LinearNeeds& needs = u->layer->info().needs;
      // A column-parallel weight's column scales span every rank's rows.
      if (needs.axiswise && u->weight->split.axis == 0) {
        cast_here.push_back(u);
        continue;
      }
      if (!needs.scaled_over_rows_of(TensorKind::kWeight)) continue;
      block.units.emplace_back(u, total);
      total += u->weight->shape.at(0);
    }
    block.count = total - block.offset;
    block.cast_here = std::move(cast_here);
  }
  if (total == 0) return absl::OkStatus();
  FP8_ASSIGN_OR_RETURN(split_weight_amaxes_, Tensor::zeros(device_, ElementType::kFloat32, {total}));
  // The casts read them from now on; refresh_split_weight_amaxes() writes them before.
  for (SplitWeightAmaxes& block : split_weight_amaxes_by_block_) {
    for (auto& [unit, offset] : block.units) unit->weight_row_amax = f(split_weight_amaxes_) + offset;
  }
  return absl::OkStatus();
}

// A row-parallel weight's rows are split along their length: each row's amax is the
// largest of the ranks' parts. A column-parallel weight's rows are whole on one rank, but
// its tensorwise cast needs the whole weight's amax: the same reduction puts, at each
// position, the largest of the ranks' rows there, whose largest is the whole weight's.
// Column-parallel weights cast per row or column are cast whole-weight-scaled instead
// (SplitWeightCasts). An all-reduce for each, per block, once its weights are present
// (under FSDP: gathered).
absl::Status LlamaModel::refresh_split_weight_amaxes(size_t b) {
  if (b >= split_weight_amaxes_by_block_.size()) return absl::OkStatus();
  SplitWeightAmaxes& block = split_weight_amaxes_by_block_[b];
  if (!block.stale) return absl::OkStatus();
  if (!block.cast_here.empty()) {
    std::vector<LinearUnit*> units;
    for (LinearUnit* u : block.cast_here) {
      if (u->gathered_fp8 == nullptr) units.push_back(u);
    }
    block.cast_here.clear();
    if (!units.empty()) {
      FP8_ASSIGN_OR_RETURN(block.casts, SplitWeightCasts::create(device_.backend(), *tp_, std::move(units)));
    }
  }
  if (block.casts) FP8_RETURN_IF_ERROR(block.casts->refresh());
  block.stale = false;
  if (block.count == 0) return absl::OkStatus();
  Backend& backend = device_.backend();
  for (auto& [unit, offset] : block.units) {
    // FSDP's fp8 all-gather gave it codes cast with the whole weight's scales already.
    if (unit->gathered_fp8 != nullptr) continue;
    const Parameter& w = *unit->weight;
    const MatrixRef values{w.value.raw(), DType::kFloat32, w.shape.at(0), w.shape.at(1)};
    FP8_RETURN_IF_ERROR(backend.amax(values, Granularity::kRowwise, f(split_weight_amaxes_) + offset));
  }
  return tp_->max(f(split_weight_amaxes_) + block.offset, block.count);
}

absl::StatusOr<Activations*> LlamaModel::activations_for(const data::TokenBatch& batch, bool for_backward) {
  if (batch.rows <= 0 || batch.seq_len <= 0 ||
      batch.inputs.size() != static_cast<size_t>(batch.rows * batch.seq_len) ||
      batch.targets.size() != batch.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("model: malformed batch of ", batch.rows, " x ", batch.seq_len));
  }
  if (config_.sequence_parallel && (batch.rows * batch.seq_len) % config_.tensor_parallel != 0) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", batch.rows * batch.seq_len, " tokens do not split over ",
                                                   config_.tensor_parallel, " sequence-parallel ranks"));
  }
  if (batch.seq_len > config_.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("model: sequences of ", batch.seq_len,
                                                   " tokens exceed model.max_seq_len ", config_.max_seq_len));
  }
  FP8_RETURN_IF_ERROR(check_ids("token", batch.inputs, config_.vocab_size, /*allow_ignore=*/false));
  FP8_RETURN_IF_ERROR(check_ids("target", batch.targets, config_.vocab_size, /*allow_ignore=*/true));
  std::optional<Activations>& acts = for_backward ? train_acts_ : eval_acts_;
  if (!acts || acts->rows != batch.rows || acts->seq != batch.seq_len) {
    acts.reset();  // free the old buffers before allocating new ones
    std::vector<BlockInputsRead> inputs_read;
    for (const TransformerBlock& b : blocks_) inputs_read.push_back(b.inputs_read_in_backward());
    FP8_ASSIGN_OR_RETURN(acts, Activations::create(device_, config_, batch.rows, batch.seq_len, for_backward,
                                                   inputs_read));
  }
  // Queued: the device may still be running the last micro-batch, which read these
  // buffers; the copies land after it, and the host does not wait.
  FP8_RETURN_IF_ERROR(acts->tokens.queue_upload<int32_t>(batch.inputs));
  FP8_RETURN_IF_ERROR(acts->targets.queue_upload<int32_t>(batch.targets));
  return &*acts;
}

absl::StatusOr<Activations*> LlamaModel::forward(const data::TokenBatch& batch, bool training) {
  FP8_ASSIGN_OR_RETURN(Activations * a, activations_for(batch, training));
  const LlamaConfig& c = config_;
  const int64_t m = a->tokens_count();
  constexpr int kRoot = ParameterHooks::kRootUnit;
  FP8_RETURN_IF_ERROR(hook_before_forward(kRoot));
  // Under sequence parallelism the residual stream holds this rank's tokens only.
  const int64_t local = a->local_tokens, first_local = local_token_offset(*a);
  FP8_RETURN_IF_ERROR(ops_.embedding_forward(a->tokens.data<int32_t>() + first_local, local, f(embeddings_->value),
                                             c.vocab_size, c.dim, act(a->hidden[0]), c.activations));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const int unit = static_cast<int>(i);
    FP8_RETURN_IF_ERROR(hook_before_forward(unit));
    FP8_RETURN_IF_ERROR(refresh_split_weight_amaxes(i));
    FP8_RETURN_IF_ERROR(blocks_[i].forward(ops_, c, *a, a->blocks[i], a->hidden[i], a->hidden[i + 1],
                                           training && TransformerBlock::forward_keeps_casts(c)));
    FP8_RETURN_IF_ERROR(hook_after_forward(unit, training));
  }
  // The output projection's fp8 cast takes its amax from the norm's row amaxes.
  float* row_amax = output_.reads_input_row_amax() ? f(a->cast_row_amax) : nullptr;
  if (c.sequence_parallel) {
    // The norm on this rank's tokens; the output projection and the loss on every token,
    // alike on every rank.
    FP8_RETURN_IF_ERROR(ops_.rmsnorm_forward(act(a->hidden.back()), f(final_norm_->value), local, c.dim, c.norm_eps,
                                             act(a->final_in_shard), f(a->final_inv_rms), c.activations));
    const size_t bytes = static_cast<size_t>(local * c.dim) * (c.activations == DType::kBFloat16 ? 2 : 4);
    FP8_RETURN_IF_ERROR(tp_->all_gather(act(a->final_in_shard), act(a->final_in), bytes, false));
    row_amax = nullptr;
  } else {
    FP8_RETURN_IF_ERROR(ops_.rmsnorm_forward(act(a->hidden.back()), f(final_norm_->value), m, c.dim, c.norm_eps,
                                             act(a->final_in), f(a->final_inv_rms), c.activations, row_amax));
  }
  FP8_RETURN_IF_ERROR(output_.forward(a->final_in, m, a->logits, training, row_amax));
  FP8_RETURN_IF_ERROR(ops_.cross_entropy_forward(f(a->logits), a->targets.data<int32_t>(), m, c.vocab_size,
                                                 f(a->loss), f(a->loss_lse), DType::kFloat32, c.padded_vocab()));
  FP8_RETURN_IF_ERROR(hook_after_forward(kRoot, training));
  return a;
}

absl::StatusOr<float> LlamaModel::read_loss(const Activations& a) {
  FP8_ASSIGN_OR_RETURN(std::vector<float> loss, a.loss.download<float>());
  return loss[0];
}

absl::StatusOr<float> LlamaModel::forward_backward(const data::TokenBatch& batch, float grad_scale) {
  FP8_RETURN_IF_ERROR(queue_training_pass(batch, grad_scale));
  // Read only now: the host waited for nothing while it queued the backward.
  return read_loss(*train_acts_);
}

absl::Status LlamaModel::queue_forward_backward(const data::TokenBatch& batch, float grad_scale, float* loss_out) {
  if (loss_out == nullptr) return absl::InvalidArgumentError("model: queue_forward_backward needs a loss_out");
  FP8_RETURN_IF_ERROR(queue_training_pass(batch, grad_scale));
  return device_.backend().copy(loss_out, train_acts_->loss.data<float>(), sizeof(float));
}

absl::Status LlamaModel::queue_training_pass(const data::TokenBatch& batch, float grad_scale) {
  FP8_RETURN_IF_ERROR(forward(batch, /*training=*/true).status());
  Activations& a = *train_acts_;
  const LlamaConfig& c = config_;
  const int64_t m = a.tokens_count();
  constexpr int kRoot = ParameterHooks::kRootUnit;
  FP8_RETURN_IF_ERROR(hook_before_backward(kRoot));
  FP8_RETURN_IF_ERROR(ops_.cross_entropy_backward(f(a.logits), a.targets.data<int32_t>(), f(a.loss_lse), m,
                                                  c.vocab_size, grad_scale, f(a.grad_logits), DType::kFloat32,
                                                  c.padded_vocab()));
  FP8_RETURN_IF_ERROR(output_.backward(a.grad_logits, &a.grad_norm_in));
  // Each op making grad_hidden writes its row amaxes too where the next block down's w2
  // takes them.
  auto grad_hidden_row_amax_below = [&](size_t block) -> float* {
    return block == 0 ? nullptr : blocks_[block - 1].w2.grad_output_row_amax_in(a.grad_hidden_row_amax);
  };
  FP8_RETURN_IF_ERROR(final_norm_->claim_grad_for_adding());
  // Under sequence parallelism the norm's backward takes this rank's tokens of the gradient
  // (every rank has all of it: the output projection ran on every token).
  const int64_t local = a.local_tokens;
  const size_t act_size = c.activations == DType::kBFloat16 ? 2 : 4;
  const void* grad_final_in =
      static_cast<const char*>(act(a.grad_norm_in)) + static_cast<size_t>(local_token_offset(a) * c.dim) * act_size;
  FP8_RETURN_IF_ERROR(ops_.rmsnorm_backward(act(a.hidden.back()), f(final_norm_->value), f(a.final_inv_rms),
                                            grad_final_in, local, c.dim, act(a.grad_hidden), f(final_norm_->grad),
                                            c.activations, Store::kOverwrite,
                                            c.sequence_parallel ? nullptr : grad_hidden_row_amax_below(blocks_.size())));
  for (size_t i = blocks_.size(); i-- > 0;) {
    const int unit = static_cast<int>(i);
    FP8_RETURN_IF_ERROR(hook_before_backward(unit));
    // Under FSDP the block's weights are gathered for its backward already; the
    // recomputation reads them there, so checkpointing costs no gather of its own.
    FP8_RETURN_IF_ERROR(blocks_[i].recompute(ops_, c, a, a.blocks[i], a.hidden[i], a.hidden[i + 1]));
    FP8_RETURN_IF_ERROR(blocks_[i].backward(ops_, c, a, a.blocks[i], a.hidden[i], grad_hidden_row_amax_below(i)));
    FP8_RETURN_IF_ERROR(hook_after_backward(unit));
  }
  FP8_RETURN_IF_ERROR(embeddings_->claim_grad_for_adding());
  const void* grad_embedded = act(a.grad_hidden);
  if (c.sequence_parallel) {
    // Every token's gradient, so that each rank's embedding gradient is whole, like the
    // output projection's, which may be the same tensor (tied embeddings): an all-gather of
    // the tokens' gradients rather than an all-reduce of the vocabulary's.
    const size_t shard_bytes = static_cast<size_t>(local * c.dim) * act_size;
    FP8_RETURN_IF_ERROR(tp_->all_gather(act(a.grad_hidden), act(a.grad_gathered), shard_bytes, false));
    grad_embedded = act(a.grad_gathered);
  }
  FP8_RETURN_IF_ERROR(ops_.embedding_backward(a.tokens.data<int32_t>(), m, grad_embedded, c.vocab_size, c.dim,
                                              f(embeddings_->grad), c.activations));
  return hook_after_backward(kRoot);
}

absl::StatusOr<float> LlamaModel::evaluate(const data::TokenBatch& batch) {
  FP8_ASSIGN_OR_RETURN(Activations * a, forward(batch, /*training=*/false));
  return read_loss(*a);
}

absl::StatusOr<std::vector<float>> LlamaModel::logits(const data::TokenBatch& batch) {
  FP8_ASSIGN_OR_RETURN(Activations * a, forward(batch, /*training=*/false));
  FP8_ASSIGN_OR_RETURN(std::vector<float> padded, a->logits.download<float>());
  const int64_t vocab = config_.vocab_size, ld = config_.padded_vocab();
  if (vocab == ld) return padded;
  std::vector<float> logits(static_cast<size_t>(a->tokens_count() * vocab));
  for (int64_t r = 0; r < a->tokens_count(); ++r) {
    std::copy_n(padded.begin() + r * ld, vocab, logits.begin() + r * vocab);
  }
  return logits;
}

int64_t LlamaModel::local_token_offset(const Activations& a) const {
  return config_.sequence_parallel ? tp_->rank() * a.local_tokens : 0;
}

absl::Status LlamaModel::finish_step() {
  // Tensor-parallel ranks measure their parts of the split tensors: the largest is the amax.
  ReducePackedAmaxes reduce;
  if (tp_ != nullptr) reduce = [this](float* packed, int64_t count) { return tp_->max(packed, count); };
  return finish_delayed_step(mutable_linears_, device_, delayed_amaxes_, reduce);
}

absl::StatusOr<std::vector<LlamaModel::WeightRowAmaxes>> LlamaModel::weight_row_amax_outputs() {
  if (weight_row_amaxes_.empty()) {
    for (LinearUnit* u : mutable_linears_) {
      // A split weight's casts take the ranks' reduced amaxes instead.
      if (!u->reads_weight_row_amax() || u->weight->split.split()) continue;
      const int64_t out_features = u->weight->shape.at(0);
      FP8_ASSIGN_OR_RETURN(Tensor buffer, Tensor::zeros(device_, ElementType::kFloat32, {out_features}));
      weight_row_amaxes_.emplace_back(u, std::move(buffer));
    }
  }
  std::vector<WeightRowAmaxes> outputs;
  for (auto& [unit, buffer] : weight_row_amaxes_) {
    outputs.push_back({unit->weight, RowAmaxes{buffer.data<float>(), unit->weight->shape.at(1)}});
  }
  return outputs;
}

void LlamaModel::set_weight_row_amaxes_current(bool current) {
  for (auto& [unit, buffer] : weight_row_amaxes_) unit->weight_row_amax = current ? buffer.data<float>() : nullptr;
  // Called whenever the weights changed.
  split_weights_changed();
}

}  // namespace fp8::engine
