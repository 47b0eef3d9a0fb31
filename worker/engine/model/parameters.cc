#include "worker/engine/model/parameters.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/parallel.h"
#include "worker/engine/data/portable_random.h"

namespace fp8::engine {

absl::StatusOr<Parameter*> ParameterSet::add(const Device& device, std::string name, TensorShape shape,
                                             ParameterInit init, bool weight_decay, ParameterStorage storage) {
  if (find(name) != nullptr) return absl::AlreadyExistsError(absl::StrCat("parameter ", name, " added twice"));
  Parameter p{.name = std::move(name), .init = init, .weight_decay = weight_decay, .shape = shape};
  if (storage == ParameterStorage::kAllocated) {
    absl::StatusOr<Tensor> value = Tensor::zeros(device, ElementType::kFloat32, shape);
    if (!value.ok()) return value.status();
    absl::StatusOr<Tensor> grad = Tensor::zeros(device, ElementType::kFloat32, shape);
    if (!grad.ok()) return grad.status();
    p.value = *std::move(value);
    p.grad = *std::move(grad);
  }
  params_.push_back(std::move(p));
  return &params_.back();
}

const Parameter* ParameterSet::find(std::string_view name) const {
  for (const Parameter& p : params_) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

int64_t ParameterSet::element_count() const {
  int64_t n = 0;
  for (const Parameter& p : params_) {
    int64_t numel = 1;
    for (int64_t d : p.shape) numel *= d;
    n += numel;
  }
  return n;
}

absl::Status ParameterSet::zero_grads() {
  for (Parameter& p : params_) {
    if (absl::Status s = p.grad.zero(); !s.ok()) return s;
    p.grad_discarded = false;
  }
  return absl::OkStatus();
}

void ParameterSet::discard_grads() {
  for (Parameter& p : params_) p.grad_discarded = true;
}

absl::Status ParameterSet::define_grads() {
  for (Parameter& p : params_) {
    if (absl::Status s = p.claim_grad_for_adding(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

Store Parameter::claim_grad() {
  const Store store = grad_discarded ? Store::kOverwrite : Store::kAccumulate;
  grad_discarded = false;
  return store;
}

absl::Status Parameter::claim_grad_for_adding() {
  if (!grad_discarded) return absl::OkStatus();
  if (absl::Status s = grad.zero(); !s.ok()) return s;
  grad_discarded = false;
  return absl::OkStatus();
}

namespace {

// FNV-1a: a stable 64-bit hash of a parameter's name (std::hash may differ between
// library versions, and the initialisation must not).
uint64_t name_hash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// Uniform in (0, 1) with 53 random bits, never 0 (the logarithm below needs that).
double open_unit(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; }

// Box-Muller, written out because std::normal_distribution's algorithm is left to each
// standard library.
void fill_normal(std::vector<float>& out, double stddev, std::mt19937_64& rng) {
  constexpr double kTwoPi = 6.283185307179586;
  for (size_t i = 0; i < out.size(); i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(open_unit(rng))) * stddev;
    const double angle = kTwoPi * open_unit(rng);
    out[i] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(radius * std::sin(angle));
  }
}

// The part of a whole matrix's row-major `values` that `split` names, [rows, cols] being
// the part's shape.
std::vector<float> part_of(const std::vector<float>& values, const ParameterSplit& split, int64_t rows, int64_t cols) {
  std::vector<float> part(static_cast<size_t>(rows * cols));
  const int64_t whole_cols = split.axis == 1 ? cols * split.parts : cols;
  const int64_t first_row = split.axis == 0 ? rows * split.index : 0;
  const int64_t first_col = split.axis == 1 ? cols * split.index : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const auto from = values.begin() + (first_row + r) * whole_cols + first_col;
    std::copy_n(from, cols, part.begin() + r * cols);
  }
  return part;
}

}  // namespace

std::vector<float> initial_values(const Parameter& p, uint64_t seed, int64_t n_layers) {
  if (p.split.split()) {
    // Drawn whole, as one process draws it, then cut.
    Parameter whole;
    whole.name = p.name;
    whole.init = p.init;
    whole.padding_rows = p.padding_rows;
    whole.shape = p.shape;
    whole.shape.at(static_cast<size_t>(p.split.axis)) *= p.split.parts;
    const int64_t rows = p.shape.at(0), cols = p.shape.size() > 1 ? p.shape.at(1) : 1;
    return part_of(initial_values(whole, seed, n_layers), p.split, rows, cols);
  }
  constexpr double kStd = 0.02;
  int64_t numel = 1;
  for (int64_t d : p.shape) numel *= d;
  std::vector<float> values(static_cast<size_t>(numel));
  std::mt19937_64 rng(data::mix_seed(seed, name_hash(p.name)));
  switch (p.init) {
    case ParameterInit::kNormal:
      fill_normal(values, kStd, rng);
      break;
    case ParameterInit::kScaledNormal:
      fill_normal(values, kStd / std::sqrt(2.0 * static_cast<double>(n_layers)), rng);
      break;
    case ParameterInit::kOnes:
      values.assign(values.size(), 1.0f);
      break;
  }
  // The real rows draw what they would without the padding: the stream runs row by row.
  if (p.padding_rows > 0) {
    const int64_t row = numel / p.shape.at(0);
    std::fill(values.end() - p.padding_rows * row, values.end(), 0.0f);
  }
  return values;
}

size_t init_threads(size_t parameters) {
  return std::min(static_cast<size_t>(fp8::cpu::configured_num_threads()), parameters);
}

// The normal draws (a logarithm, a square root, a cosine and a sine per pair) make a 1B
// model slow to initialise on one thread. Each parameter's values depend only on the
// seed and its name, so the parameters are drawn on several threads, largest first, with
// the same bits whatever the thread count.
absl::Status init_parameters(ParameterSet& params, uint64_t seed, int64_t n_layers) {
  std::vector<Parameter*> order;
  for (Parameter& p : params.all()) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(),
                   [](const Parameter* a, const Parameter* b) { return a->value.numel() > b->value.numel(); });
  std::vector<absl::Status> status(order.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < order.size(); i = next++) {
      status[i] = order[i]->value.upload<float>(initial_values(*order[i], seed, n_layers));
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < init_threads(order.size()); ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace fp8::engine
