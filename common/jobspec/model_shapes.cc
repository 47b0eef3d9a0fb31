#include "common/jobspec/model_shapes.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace fp8::jobspec {
namespace {

bool in_range(int64_t v, int64_t max) { return v > 0 && v <= max; }

}  // namespace

int64_t llama_ffn_dim(int64_t dim) {
  constexpr int64_t kMultipleOf = 16;
  int64_t hidden = 2 * (4 * dim) / 3;
  return (hidden + kMultipleOf - 1) / kMultipleOf * kMultipleOf;
}

bool model_shape_is_known(const v1::ModelSpec& m) {
  if (!in_range(m.dim(), kMaxWidth) || !in_range(m.n_layers(), kMaxLayers) || !in_range(m.n_heads(), m.dim()) ||
      !in_range(m.n_kv_heads(), m.n_heads()) || !in_range(m.ffn_dim(), kMaxWidth) ||
      !in_range(m.vocab_size(), kMaxWidth)) {
    return false;
  }
  return m.dim() % m.n_heads() == 0 && m.n_heads() % m.n_kv_heads() == 0;
}

std::vector<LinearLayer> list_linear_layers(const v1::ModelSpec& m) {
  std::vector<LinearLayer> layers;
  if (!model_shape_is_known(m)) return layers;
  const int64_t dim = m.dim();
  const int64_t kv_dim = dim / m.n_heads() * m.n_kv_heads();
  const int64_t ffn = m.ffn_dim();
  struct Role {
    const char* name;
    int64_t in, out;
  };
  const Role roles[] = {
      {"attention.wq", dim, dim},    {"attention.wk", dim, kv_dim}, {"attention.wv", dim, kv_dim},
      {"attention.wo", dim, dim},    {"feed_forward.w1", dim, ffn}, {"feed_forward.w2", ffn, dim},
      {"feed_forward.w3", dim, ffn},
  };
  layers.reserve(static_cast<size_t>(m.n_layers()) * std::size(roles) + 1);
  for (int block = 0; block < m.n_layers(); ++block) {
    for (const Role& role : roles) {
      layers.push_back({absl::StrCat("layers.", block, ".", role.name), role.name, block, role.in, role.out});
    }
  }
  layers.push_back({"output", "output", -1, dim, padded_vocabulary(m.vocab_size())});
  return layers;
}

int64_t tensor_parallel_ranks(const v1::JobSpec& spec) {
  const int32_t tensor = spec.parallel().tensor();
  return tensor >= 1 && tensor <= kMaxTensorParallel ? tensor : 1;
}

int data_parallel_ranks(const v1::JobSpec& spec) {
  return std::max(1, spec.resources().world_size() / static_cast<int>(tensor_parallel_ranks(spec)));
}

LinearLayer tensor_parallel_share(const LinearLayer& layer, int64_t tensor) {
  LinearLayer share = layer;
  if (tensor <= 1 || layer.block < 0) return share;
  if (layer.role == "attention.wo" || layer.role == "feed_forward.w2") {
    share.in_features /= tensor;
  } else {
    share.out_features /= tensor;
  }
  return share;
}

}  // namespace fp8::jobspec
