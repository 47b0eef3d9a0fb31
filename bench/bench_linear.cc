// bench_linear: one training step of a linear layer per fp8 recipe against the same layer
// in high precision, side by side in one run. The GEMM speedups of bench_gemm are an upper
// bound; what a model gains is that minus the casts, transposes and scale bookkeeping the
// layer adds around its three GEMMs, and this measures the layer whole.
//
// Two workloads ("modes"), shapes given as tokens M, in_features K, out_features N:
//
//   step    torchao's "ln -> linear -> sigmoid" microbenchmark, so the ratios sit next to
//           the ones torchao publishes for it. One iteration, the loss being
//           the sum of the outputs: RMSNorm forward (the device's ModelOps), linear
//           forward, sigmoid forward, sigmoid backward, linear backward (grad_input and
//           grad_weight), RMSNorm backward, finish_step() (where delayed scaling updates
//           its histories and scales). The loss's own reduction is left out (the backward
//           needs only its gradient, ones); torch's sum() costs one read of the output.
//   linear  the linear layer alone: forward, then backward from a fixed upstream gradient,
//           and finish_step(). Issue 8's "Float8Linear forward + backward".
//
// Activations (--activations; bf16 by default on CUDA, fp32 on the CPU): the dtype of every
// activation of the step and its gradient: x, the RMSNorm's output, the linear's output,
// the sigmoid's output, the upstream gradient and every grad_input. Weights (the fp32
// master), their gradients and the RMSNorm's saved inv_rms are fp32 either way. With bf16
// the step is what a mixed-precision model runs (train.compute_dtype: bf16) and what
// torchao's benchmark runs (bf16 throughout): RMSNorm and sigmoid read and write bf16,
// computing in fp32, and every Float8Linear takes and gives bf16.
//
// Contenders:
//   none        Float8Linear with recipe none. fp32 activations: three fp32 GEMMs (no TF32
//               on CUDA). bf16 activations: the bf16 linear, as torch.autocast runs one:
//               the fp32 weight converted to bf16 once per forward (kept for the backward),
//               three bf16 GEMMs with fp32 accumulation, bf16 outputs, grad_weight
//               accumulated in fp32. Then the like-for-like baseline for the fp8 recipes.
//   bf16        (fp32 activations only) a bf16 linear inside an fp32 model, as autocast
//               runs one there: x, W and the upstream gradient converted to bf16 each step,
//               three bf16 GEMMs with fp32 accumulation and fp32 outputs (grad_weight
//               accumulated): the baseline for fp8 recipes with fp32 activations. With bf16
//               activations recipe none is this linear, without the conversions of x and g.
//   bf16_gemms  (linear mode only) the three GEMMs of a bf16 nn.Linear on bf16 tensors made
//               once, bf16 outputs (grad_weight too), no conversions at all: a lower bound
//               for any bf16 linear.
//   tensorwise, rowwise, rowwise_with_gw_hp, delayed, blockwise: Float8Linear per recipe
//               (casts, transposes, scales and all), activations in the run's dtype.
//               blockwise (1x128 activation and gradient tiles, 128x128 weight blocks) runs
//               only where its three GEMMs contract in whole 128-wide blocks (M, K and N
//               multiples of 128) and the backend takes block scales; elsewhere its row is
//               left out and a note printed under the table says why.
//
// Before timing, every contender runs one step from the same inputs and the linear's
// output and the step's grad_input are compared with recipe none's (relative L2 error),
// so a wrongly wired contender shows in the table rather than as a fast wrong number.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_cuda.h"
#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "fp8/arith.h"
#include "fp8/model_ops.h"
#include "worker/engine/float8/config.h"
#include "worker/engine/float8/linear.h"
#include "worker/engine/tensor/device.h"

namespace fp8::bench {
namespace {

using engine::Float8Linear;

constexpr const char* kUsage =
    "usage: bench_linear [--device cpu|cuda] [--quick] [--max-size N] [--csv FILE]\n"
    "                    [--modes step,linear] [--shapes MxKxN,...] [--activations fp32|bf16]\n"
    "                    [--no-check]\n"
    "  Times one training step of a linear layer per fp8 recipe (Float8Linear) against\n"
    "  recipe none and a bf16 linear, in torchao's ln -> linear -> sigmoid step (mode step)\n"
    "  and alone (mode linear), and prints the speedups. Recipes: tensorwise, rowwise,\n"
    "  rowwise_with_gw_hp, delayed, blockwise (blockwise only where M, K and N are multiples\n"
    "  of 128 and the backend takes block scales; a note says why it is left out).\n"
    "  --activations: dtype of the step's activations and their gradients (weights stay\n"
    "  fp32). bf16: recipe none is the bf16 linear (bf16 GEMMs); fp32: recipe none runs\n"
    "  fp32 GEMMs and an autocast-style bf16 linear is the bf16 baseline.\n"
    "  Default shapes: cuda 4096^3, 8192^3, 16384^3 and M=16384 K=N=8192; cpu 512^3 to 2048^3.\n"
    "  Default modes: step,linear on cuda, step on cpu. Default activations: bf16 on cuda,\n"
    "  fp32 on cpu.";

constexpr float kEps = 1e-5f;

struct Shape {
  int64_t m, k, n;  // tokens, in_features, out_features
  std::string label() const {
    if (m == k && k == n) return std::to_string(m) + "^3";
    return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  }
  // Three GEMMs of 2·M·K·N each.
  double gemm_flops() const { return 6.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n); }
};

// bench_linear's own flags; the rest go to parse_options.
struct LinearOptions {
  std::vector<std::string> modes;
  std::vector<Shape> shapes;
  std::string activations;  // fp32 | bf16; empty: the device's default
  bool check = true;
};

const char* act_name(DType act) { return act == DType::kBFloat16 ? "bf16" : "fp32"; }
size_t act_bytes(DType act) { return act == DType::kBFloat16 ? 2 : 4; }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

Shape parse_shape(const std::string& s) {
  const std::vector<std::string> d = split(s, 'x');
  Shape shape{0, 0, 0};
  if (d.size() == 1) shape = {std::atoll(d[0].c_str()), std::atoll(d[0].c_str()), std::atoll(d[0].c_str())};
  if (d.size() == 3) shape = {std::atoll(d[0].c_str()), std::atoll(d[1].c_str()), std::atoll(d[2].c_str())};
  if (shape.m <= 0 || shape.k <= 0 || shape.n <= 0) die("--shapes: '" + s + "' is not D or MxKxN with positive sizes");
  return shape;
}

// Pulls bench_linear's flags out of argv; what remains is parsed by parse_options.
LinearOptions take_linear_options(int& argc, char** argv) {
  LinearOptions lo;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--modes" && i + 1 < argc) {
      lo.modes = split(argv[++i], ',');
      for (const auto& m : lo.modes) {
        if (m != "step" && m != "linear") die("--modes: '" + m + "' is neither step nor linear");
      }
    } else if (a == "--shapes" && i + 1 < argc) {
      for (const auto& s : split(argv[++i], ',')) lo.shapes.push_back(parse_shape(s));
    } else if (a == "--activations" && i + 1 < argc) {
      lo.activations = argv[++i];
      if (lo.activations != "fp32" && lo.activations != "bf16") {
        die("--activations: '" + lo.activations + "' is neither fp32 nor bf16");
      }
    } else if (a == "--no-check") {
      lo.check = false;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return lo;
}

std::vector<Shape> shapes_for(const Options& o, const LinearOptions& lo, bool gpu) {
  std::vector<Shape> s = lo.shapes;
  if (s.empty()) {
    const std::vector<int64_t> square = gpu ? (o.quick ? std::vector<int64_t>{4096, 8192}
                                                       : std::vector<int64_t>{4096, 8192, 16384})
                                            : (o.quick ? std::vector<int64_t>{256, 512, 1024}
                                                       : std::vector<int64_t>{512, 1024, 2048});
    for (int64_t d : square) s.push_back({d, d, d});
    // Issue 8's target shape: 16384 tokens through an 8192 -> 8192 layer.
    if (gpu) s.push_back({16384, 8192, 8192});
  }
  std::vector<Shape> kept;
  for (const Shape& x : s) {
    if (o.max_size == 0 || std::max({x.m, x.k, x.n}) <= o.max_size) kept.push_back(x);
  }
  return kept;
}

struct Recipe {
  const char* name;
  v1::Fp8Spec::Recipe recipe;
};
constexpr Recipe kFp8Recipes[] = {{"tensorwise", v1::Fp8Spec::TENSORWISE},
                                  {"rowwise", v1::Fp8Spec::ROWWISE},
                                  {"rowwise_with_gw_hp", v1::Fp8Spec::ROWWISE_WITH_GW_HP},
                                  {"delayed", v1::Fp8Spec::DELAYED},
                                  {"blockwise", v1::Fp8Spec::BLOCKWISE}};

absl::StatusOr<std::unique_ptr<Float8Linear>> try_make_layer(Backend& b, const Shape& s, v1::Fp8Spec::Recipe recipe,
                                                             DType act) {
  auto config = engine::recipe_config(recipe);
  if (!config.ok()) return config.status();
  return Float8Linear::create(b, s.k, s.n, *config, engine::LinearActivations{act, act});
}

std::unique_ptr<Float8Linear> make_layer(Backend& b, const Shape& s, v1::Fp8Spec::Recipe recipe, DType act,
                                         const char* name) {
  auto layer = try_make_layer(b, s, recipe, act);
  check(layer.status(), name);
  return std::move(*layer);
}

// Why blockwise cannot run on this shape, or "" where it can: each of its three GEMMs
// contracts one dimension in 128-wide blocks (the output K, grad_input N, grad_weight the
// tokens M).
std::string blockwise_shape_problem(const Shape& s) {
  std::string bad;
  for (const auto& [name, v] : {std::pair<const char*, int64_t>{"M", s.m}, {"K", s.k}, {"N", s.n}}) {
    if (v % kScaleBlock != 0) bad += std::string(bad.empty() ? "" : ", ") + name + "=" + std::to_string(v);
  }
  if (bad.empty()) return "";
  return bad + " not a multiple of " + std::to_string(kScaleBlock) +
         " (block-scaled GEMMs contract in whole 128-wide blocks: K in the forward, N in grad_input, the tokens M "
         "in grad_weight)";
}

// N(0, 1) values (fill_gaussian's) into backend memory as `act`: generated as fp32, then
// rounded to bf16 where act is bf16.
void fill_gaussian_act(Backend& b, DeviceBuffer& buf, int64_t n, uint32_t seed, DType act) {
  if (act == DType::kFloat32) return fill_gaussian(buf, n, seed);
  DeviceBuffer f32(b, static_cast<size_t>(n) * sizeof(float));
  fill_gaussian(f32, n, seed);
  check(b.convert(f32.as<void>(), DType::kFloat32, buf.as<void>(), act, n), "convert to activations");
  check(b.synchronize(), "synchronize");
}

// Every buffer of one shape, shared by the contenders (each step overwrites what it reads,
// apart from the accumulated parameter gradients). Activations and their gradients are of
// dtype `act`; the weights, their gradients and inv_rms fp32.
struct Buffers {
  Buffers(Backend& b, const Shape& s, DType activations)
      : act(activations), x(b, a(s.m * s.k)), norm_w(b, f32(s.k)), inv_rms(b, f32(s.m)), normed(b, a(s.m * s.k)),
        normed_row_amax(b, f32(s.m)),
        w(b, f32(s.n * s.k)), y(b, a(s.m * s.n)), s_out(b, a(s.m * s.n)), grad_y(b, a(s.m * s.n)),
        grad_fixed(b, a(s.m * s.n)), grad_normed(b, a(s.m * s.k)), grad_x(b, a(s.m * s.k)), grad_w(b, f32(s.n * s.k)),
        grad_norm_w(b, f32(s.k)) {
    fill_gaussian_act(b, x, s.m * s.k, 1, act);
    fill_gaussian(w, s.n * s.k, 2);
    fill_gaussian_act(b, grad_fixed, s.m * s.n, 3, act);  // the linear mode's upstream gradient
    // The weight at nn.Linear's scale (U(±1/sqrt(K)) has std 1/sqrt(3K)), so that outputs
    // are O(1) and the sigmoid is not saturated: the gradients it passes back are then
    // representative of a real layer's.
    std::vector<float> host(static_cast<size_t>(s.n * s.k));
    check(b.copy_to_host(host.data(), w.as<float>(), host.size() * sizeof(float)), "download w");
    const float factor = 1.0f / std::sqrt(3.0f * static_cast<float>(s.k));
    for (float& v : host) v *= factor;
    w.upload(host.data(), host.size() * sizeof(float));
    const std::vector<float> ones(static_cast<size_t>(s.k), 1.0f);
    norm_w.upload(ones.data(), f32(s.k));
    check(b.fill_zero(grad_norm_w.as<void>(), f32(s.k)), "zero");
    check(b.fill_zero(grad_w.as<void>(), f32(s.n * s.k)), "zero");
    check(b.synchronize(), "synchronize");
  }
  static size_t f32(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
  size_t a(int64_t n) const { return static_cast<size_t>(n) * act_bytes(act); }

  DType act;
  DeviceBuffer x, norm_w, inv_rms, normed, normed_row_amax, w, y, s_out, grad_y, grad_fixed, grad_normed, grad_x,
      grad_w, grad_norm_w;
};

size_t bf16_bytes(int64_t n) { return static_cast<size_t>(n) * 2; }

// A bf16 linear inside an fp32 model, as torch.autocast runs nn.Linear: each forward
// converts the input and the fp32 master weight to bf16 (kept for the backward, as autocast
// saves its casts), the backward converts the upstream gradient; GEMMs in bf16 with fp32
// accumulation and fp32 outputs, grad_weight accumulated into the fp32 gradient.
class Bf16Linear {
 public:
  Bf16Linear(Backend& b, const Shape& s)
      : b_(b), s_(s), xb_(b, bf16_bytes(s.m * s.k)), wb_(b, bf16_bytes(s.n * s.k)), gb_(b, bf16_bytes(s.m * s.n)) {}

  void forward(const float* x, const float* w, float* y) {
    check(b_.convert(x, DType::kFloat32, xb_.as<void>(), DType::kBFloat16, s_.m * s_.k), "bf16 convert x");
    check(b_.convert(w, DType::kFloat32, wb_.as<void>(), DType::kBFloat16, s_.n * s_.k), "bf16 convert w");
    GemmArgs g;  // y [M, N] = x [M, K] · W [N, K]ᵀ
    g.m = s_.m, g.n = s_.n, g.k = s_.k;
    g.a = xb_.as<void>(), g.b = wb_.as<void>(), g.in_dtype = DType::kBFloat16, g.trans_b = true;
    g.out = y, g.out_dtype = DType::kFloat32;
    check(b_.gemm(g), "bf16 forward gemm");
  }

  void backward(const float* grad_y, float* grad_x, float* grad_w) {
    check(b_.convert(grad_y, DType::kFloat32, gb_.as<void>(), DType::kBFloat16, s_.m * s_.n), "bf16 convert grad");
    GemmArgs gi;  // grad_x [M, K] = g [M, N] · W [N, K]
    gi.m = s_.m, gi.n = s_.k, gi.k = s_.n;
    gi.a = gb_.as<void>(), gi.b = wb_.as<void>(), gi.in_dtype = DType::kBFloat16;
    gi.out = grad_x, gi.out_dtype = DType::kFloat32;
    check(b_.gemm(gi), "bf16 grad_input gemm");
    GemmArgs gw;  // grad_w [N, K] += g [M, N]ᵀ · x [M, K]
    gw.m = s_.n, gw.n = s_.k, gw.k = s_.m;
    gw.a = gb_.as<void>(), gw.trans_a = true, gw.b = xb_.as<void>(), gw.in_dtype = DType::kBFloat16;
    gw.out = grad_w, gw.out_dtype = DType::kFloat32, gw.beta = 1.0f;
    check(b_.gemm(gw), "bf16 grad_weight gemm");
  }

 private:
  Backend& b_;
  Shape s_;
  DeviceBuffer xb_, wb_, gb_;
};

// The three GEMMs of a bf16 nn.Linear on bf16 tensors (bf16 copies of the shared buffers,
// made once): nothing converted, bf16 outputs, grad_weight written (as torch with grads
// set to None).
class Bf16Gemms {
 public:
  Bf16Gemms(Backend& b, const Shape& s, const Buffers& f)
      : b_(b), s_(s), xb_(b, bf16_bytes(s.m * s.k)), wb_(b, bf16_bytes(s.n * s.k)), gb_(b, bf16_bytes(s.m * s.n)),
        yb_(b, bf16_bytes(s.m * s.n)), gxb_(b, bf16_bytes(s.m * s.k)), gwb_(b, bf16_bytes(s.n * s.k)) {
    check(b.convert(f.x.as<void>(), f.act, xb_.as<void>(), DType::kBFloat16, s.m * s.k), "convert");
    check(b.convert(f.w.as<void>(), DType::kFloat32, wb_.as<void>(), DType::kBFloat16, s.n * s.k), "convert");
    check(b.convert(f.grad_fixed.as<void>(), f.act, gb_.as<void>(), DType::kBFloat16, s.m * s.n), "convert");
  }

  void step() {
    GemmArgs g;
    g.m = s_.m, g.n = s_.n, g.k = s_.k;
    g.a = xb_.as<void>(), g.b = wb_.as<void>(), g.in_dtype = DType::kBFloat16, g.trans_b = true;
    g.out = yb_.as<void>(), g.out_dtype = DType::kBFloat16;
    check(b_.gemm(g), "bf16 forward gemm");
    GemmArgs gi;
    gi.m = s_.m, gi.n = s_.k, gi.k = s_.n;
    gi.a = gb_.as<void>(), gi.b = wb_.as<void>(), gi.in_dtype = DType::kBFloat16;
    gi.out = gxb_.as<void>(), gi.out_dtype = DType::kBFloat16;
    check(b_.gemm(gi), "bf16 grad_input gemm");
    GemmArgs gw;
    gw.m = s_.n, gw.n = s_.k, gw.k = s_.m;
    gw.a = gb_.as<void>(), gw.trans_a = true, gw.b = xb_.as<void>(), gw.in_dtype = DType::kBFloat16;
    gw.out = gwb_.as<void>(), gw.out_dtype = DType::kBFloat16;
    check(b_.gemm(gw), "bf16 grad_weight gemm");
  }

  // The output and grad_input (bf16), for the check.
  const void* y() const { return yb_.as<void>(); }
  const void* grad_x() const { return gxb_.as<void>(); }

 private:
  Backend& b_;
  Shape s_;
  DeviceBuffer xb_, wb_, gb_, yb_, gxb_, gwb_;
};

// One contender: exactly one of the three layer kinds.
struct Contender {
  std::string name;
  std::unique_ptr<Float8Linear> fp8;  // recipe none and the fp8 recipes
  std::unique_ptr<Bf16Linear> bf16;
  std::unique_ptr<Bf16Gemms> gemms;
};

class Bench {
 public:
  Bench(const engine::Device& device, const Shape& s, DType act)
      : dev_(device), b_(device.backend()), s_(s), act_(act), f_(b_, s, act) {
    auto ops = device.model_ops();
    check(ops.status(), "model ops");
    ops_ = *ops;
  }

  // `notes` collects why a recipe was left out (each reason once).
  std::vector<Contender> contenders(const std::string& mode, std::vector<std::string>& notes) {
    auto note = [&notes](const std::string& n) {
      if (std::find(notes.begin(), notes.end(), n) == notes.end()) notes.push_back(n);
    };
    std::vector<Contender> c;
    c.push_back({"none", make_layer(b_, s_, v1::Fp8Spec::NONE, act_, "none"), nullptr, nullptr});
    if (act_ == DType::kFloat32) c.push_back({"bf16", nullptr, std::make_unique<Bf16Linear>(b_, s_), nullptr});
    if (mode == "linear") c.push_back({"bf16_gemms", nullptr, nullptr, std::make_unique<Bf16Gemms>(b_, s_, f_)});
    for (const Recipe& r : kFp8Recipes) {
      if (r.recipe != v1::Fp8Spec::BLOCKWISE) {
        c.push_back({r.name, make_layer(b_, s_, r.recipe, act_, r.name), nullptr, nullptr});
        continue;
      }
      // Left out rather than fatal: the other recipes' rows still stand on shapes or
      // backends block scaling does not take (the CUDA backend refuses it for now).
      if (const std::string why = blockwise_shape_problem(s_); !why.empty()) {
        note("blockwise skipped for " + s_.label() + ": " + why);
        continue;
      }
      auto layer = try_make_layer(b_, s_, r.recipe, act_);
      if (!layer.ok()) {
        note("blockwise skipped on backend " + b_.name() + ": " + std::string(layer.status().message()));
        continue;
      }
      c.push_back({r.name, std::move(*layer), nullptr, nullptr});
    }
    return c;
  }

  // One iteration of `mode` with contender c.
  void run(const std::string& mode, Contender& c) {
    if (c.gemms) {
      c.gemms->step();
      return;
    }
    const int64_t mn = s_.m * s_.n;
    if (mode == "linear") {
      forward(c, f_.x.as<void>(), f_.y.as<void>());
      backward(c, f_.grad_fixed.as<void>(), f_.grad_x.as<void>());
      finish(c);
      return;
    }
    // As the model runs it: the norm hands its row amaxes to a dynamically scaled fp8 cast.
    const bool reads_row_amax = c.fp8 && c.fp8->info().needs.row_amax_of(engine::TensorKind::kInput);
    float* row_amax = reads_row_amax ? f_.normed_row_amax.as<float>() : nullptr;
    check(ops_->rmsnorm_forward(f_.x.as<void>(), f_.norm_w.as<float>(), s_.m, s_.k, kEps, f_.normed.as<void>(),
                                f_.inv_rms.as<float>(), act_, row_amax),
          "rmsnorm_forward");
    forward(c, f_.normed.as<void>(), f_.y.as<void>(), row_amax);
    sigmoid_forward(f_.y.as<void>(), mn, f_.s_out.as<void>());
    sigmoid_backward_of_sum(f_.s_out.as<void>(), mn, f_.grad_y.as<void>());
    backward(c, f_.grad_y.as<void>(), f_.grad_normed.as<void>());
    check(ops_->rmsnorm_backward(f_.x.as<void>(), f_.norm_w.as<float>(), f_.inv_rms.as<float>(),
                                 f_.grad_normed.as<void>(), s_.m, s_.k, f_.grad_x.as<void>(),
                                 f_.grad_norm_w.as<float>(), act_),
          "rmsnorm_backward");
    finish(c);
  }

  // The linear's output (before the sigmoid, whose ~0.5 offset would hide its errors) and
  // the step's grad_input (of x, through the RMSNorm in mode step), on the host as fp32
  // (bf16 widened), after one run().
  void outputs(Contender& c, std::vector<float>& out, std::vector<float>& grad_in) {
    if (c.gemms) {
      download(c.gemms->y(), DType::kBFloat16, s_.m * s_.n, out);
      download(c.gemms->grad_x(), DType::kBFloat16, s_.m * s_.k, grad_in);
      return;
    }
    download(f_.y.as<void>(), act_, s_.m * s_.n, out);
    download(f_.grad_x.as<void>(), act_, s_.m * s_.k, grad_in);
  }

  Backend& backend() { return b_; }

 private:
  void download(const void* src, DType dtype, int64_t n, std::vector<float>& dst) {
    dst.resize(static_cast<size_t>(n));
    if (dtype == DType::kFloat32) {
      check(b_.copy_to_host(dst.data(), src, dst.size() * sizeof(float)), "download");
      return;
    }
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    check(b_.copy_to_host(bits.data(), src, bits.size() * sizeof(uint16_t)), "download");
    for (size_t i = 0; i < bits.size(); ++i) dst[i] = bf16_to_float(bits[i]);
  }

  void forward(Contender& c, const void* in, void* out, const float* in_row_amax = nullptr) {
    if (c.bf16) return c.bf16->forward(static_cast<const float*>(in), f_.w.as<float>(), static_cast<float*>(out));
    check(c.fp8->forward(in, s_.m, f_.w.as<float>(), nullptr, out, {.input_row_amax = in_row_amax}), "forward");
  }
  void backward(Contender& c, const void* grad_out, void* grad_in) {
    if (c.bf16) {
      return c.bf16->backward(static_cast<const float*>(grad_out), static_cast<float*>(grad_in),
                              f_.grad_w.as<float>());
    }
    check(c.fp8->backward(grad_out, grad_in, f_.grad_w.as<float>(), nullptr), "backward");
  }
  void finish(Contender& c) {
    if (c.fp8) check(c.fp8->finish_step(), "finish_step");
  }

  // The sigmoid and its backward, in the activations' dtype: computed in fp32, bf16 results
  // rounded once (the CPU loops with fp8/arith.h's conversions, the CUDA kernels alike).
  void sigmoid_forward(const void* y, int64_t n, void* s) {
    if (act_ == DType::kBFloat16) {
      const auto* yb = static_cast<const uint16_t*>(y);
      auto* sb = static_cast<uint16_t*>(s);
      if (dev_.is_cuda()) return check(cuda_sigmoid_forward(yb, n, sb, dev_.stream()), "sigmoid");
      for (int64_t i = 0; i < n; ++i) sb[i] = float_to_bf16(1.0f / (1.0f + std::exp(-bf16_to_float(yb[i]))));
      return;
    }
    const auto* yf = static_cast<const float*>(y);
    auto* sf = static_cast<float*>(s);
    if (dev_.is_cuda()) return check(cuda_sigmoid_forward(yf, n, sf, dev_.stream()), "sigmoid");
    for (int64_t i = 0; i < n; ++i) sf[i] = 1.0f / (1.0f + std::exp(-yf[i]));
  }
  // d(sum of sigmoid(y))/dy = s (1 - s), from the saved output s.
  void sigmoid_backward_of_sum(const void* s, int64_t n, void* g) {
    if (act_ == DType::kBFloat16) {
      const auto* sb = static_cast<const uint16_t*>(s);
      auto* gb = static_cast<uint16_t*>(g);
      if (dev_.is_cuda()) return check(cuda_sigmoid_backward_of_sum(sb, n, gb, dev_.stream()), "sigmoid backward");
      for (int64_t i = 0; i < n; ++i) {
        const float v = bf16_to_float(sb[i]);
        gb[i] = float_to_bf16(v * (1.0f - v));
      }
      return;
    }
    const auto* sf = static_cast<const float*>(s);
    auto* gf = static_cast<float*>(g);
    if (dev_.is_cuda()) return check(cuda_sigmoid_backward_of_sum(sf, n, gf, dev_.stream()), "sigmoid backward");
    for (int64_t i = 0; i < n; ++i) gf[i] = sf[i] * (1.0f - sf[i]);
  }

  const engine::Device& dev_;
  Backend& b_;
  Shape s_;
  DType act_;
  Buffers f_;
  ModelOps* ops_ = nullptr;
};

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (!std::isfinite(num)) return num;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::string sci(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

int run(int argc, char** argv) {
  const LinearOptions lo_in = take_linear_options(argc, argv);
  const Options o = parse_options(argc, argv, kUsage);

  std::unique_ptr<engine::Device> cuda;
  const engine::Device* dev = &open_engine_device(o.device == "cuda", cuda);
  Backend& b = dev->backend();
  const bool gpu = dev->is_cuda();
  LinearOptions lo = lo_in;
  if (lo.modes.empty()) lo.modes = gpu ? std::vector<std::string>{"step", "linear"} : std::vector<std::string>{"step"};
  if (lo.activations.empty()) lo.activations = gpu ? "bf16" : "fp32";
  const DType act = lo.activations == "bf16" ? DType::kBFloat16 : DType::kFloat32;
  const bool bf16_act = act == DType::kBFloat16;
  // The row of the bf16 baseline: the autocast-style bf16 linear with fp32 activations,
  // recipe none itself (which then runs bf16 GEMMs) with bf16 activations.
  const std::string baseline = bf16_act ? "none" : "bf16";
  const Peaks peaks = machine_peaks(b);

  std::printf("# bench_linear %s on %s (backend %s), activations %s\n", today().c_str(), peaks.machine.c_str(),
              b.name().c_str(), act_name(act));
  std::printf("# ms per training step; shape: tokens M x in K x out N (D^3: all three D); TFLOP/s counts the three "
              "GEMMs (6 M K N)\n");
  std::printf("# activations %s (--activations): x, the RMSNorm's and the linear's outputs, the sigmoid's, the "
              "upstream gradient and every grad_input; weights, their gradients and inv_rms fp32\n",
              act_name(act));
  std::printf("# step: ln -> linear -> sigmoid: RMSNorm (%s ModelOps, %s), linear, sigmoid (%s, %s), forward and "
              "backward, finish_step\n",
              gpu ? "CUDA" : "CPU", act_name(act), gpu ? "bench/bench_cuda_kernels.cu" : "host loop", act_name(act));
  std::printf("# linear: the layer alone, forward and backward from a fixed upstream gradient, finish_step\n");
  if (bf16_act) {
    std::printf("# none = the bf16 linear: Float8Linear recipe none with bf16 activations, as autocast: the fp32 "
                "weight converted to bf16 each forward, three bf16 GEMMs%s, bf16 in and out, grad_weight fp32;\n",
                gpu ? "" : " (fp32 sgemm on widened values)");
    std::printf("# bf16_gemms: the 3 GEMMs of a bf16 nn.Linear on bf16 tensors, bf16 out (no weight conversion); fp8 "
                "recipes: Float8Linear, bf16 in and out\n");
  } else {
    std::printf("# none: Float8Linear recipe none, fp32 GEMMs%s; bf16: fp32 in, bf16 GEMM operands (converted "
                "each step, as autocast), fp32 out;\n",
                gpu ? " (no TF32)" : " (OpenBLAS sgemm)");
    std::printf("# bf16_gemms: the 3 GEMMs of a bf16 nn.Linear on bf16 tensors, bf16 out (no conversions); fp8 "
                "recipes: Float8Linear, fp32 in and out\n");
  }
  if (!gpu) {
    std::printf("# CPU: bf16 GEMMs run as fp32 sgemm on widened values and fp8 is emulated, so neither is a "
                "speed baseline here: the CPU run checks the wiring\n");
  }
  std::printf("# timing: contenders of a mode take turns, one batch each per round (median of %d); err: relative "
              "L2 error of the linear's output and of grad_input vs none\n",
              o.quick ? 5 : 7);

  std::FILE* csv = o.csv.empty() ? nullptr : std::fopen(o.csv.c_str(), "w");
  if (!o.csv.empty() && csv == nullptr) die("cannot write " + o.csv);
  if (csv != nullptr) std::fprintf(csv, "mode,activations,m,k,n,contender,ms,err_out,err_grad_input\n");

  // With bf16 activations none is the bf16 baseline: one column for both.
  std::vector<std::string> header = {"mode", "shape", "contender", "ms", "TFLOP/s"};
  if (bf16_act) {
    header.push_back("vs none=bf16");
  } else {
    header.push_back("vs none");
    header.push_back("vs bf16");
  }
  for (const char* h : {"vs bf16_gemms", "err out", "err grad_in"}) header.push_back(h);
  Table table(header);
  // (mode, shape label) -> contender -> ms, for the target lines.
  std::map<std::pair<std::string, std::string>, std::map<std::string, double>> results;
  bool suspicious = false;
  std::vector<std::string> notes;
  for (const Shape& s : shapes_for(o, lo, gpu)) {
    Bench bench(*dev, s, act);
    for (const std::string& mode : lo.modes) {
      std::vector<Contender> cs = bench.contenders(mode, notes);
      std::vector<double> err_out(cs.size(), NAN), err_grad(cs.size(), NAN);
      if (lo.check) {
        std::vector<float> ref_out, ref_grad, out, grad;
        for (size_t i = 0; i < cs.size(); ++i) {
          bench.run(mode, cs[i]);
          bench.outputs(cs[i], i == 0 ? ref_out : out, i == 0 ? ref_grad : grad);
          if (i == 0) {
            err_out[0] = err_grad[0] = 0;
            continue;
          }
          err_out[i] = rel_err(out, ref_out);
          err_grad[i] = rel_err(grad, ref_grad);
          // bf16 keeps 8 significant bits (errors ~0.3%); fp8 e4m3/e5m2 a few percent. With
          // bf16 activations none is itself bf16, so bf16_gemms differs from it by roundings.
          const double limit = cs[i].fp8 ? 0.3 : 0.03;
          if (!(err_out[i] < limit && err_grad[i] < limit)) {
            suspicious = true;
            std::printf("WARNING: %s %s %s: error vs none %.3g (output), %.3g (grad_input), above %.2g: check it\n",
                        mode.c_str(), s.label().c_str(), cs[i].name.c_str(), err_out[i], err_grad[i], limit);
          }
        }
      }
      std::vector<std::function<void()>> fns;
      std::vector<int> iters;
      for (Contender& c : cs) {
        fns.push_back([&bench, &mode, &c] { bench.run(mode, c); });
        // One untimed call warms up, one sizes the batches: ~50 ms each, as the
        // contenders take turns.
        iters.push_back(iterations_for(time_it(b, fns.back(), 1, 1, 1), 0.05));
      }
      const std::vector<double> t = time_interleaved(b, fns, iters, o.quick ? 5 : 7, 0);
      auto& r = results[{mode, s.label()}];
      for (size_t i = 0; i < cs.size(); ++i) r[cs[i].name] = t[i];
      for (size_t i = 0; i < cs.size(); ++i) {
        const double ms = t[i] * 1e3;
        std::vector<std::string> row = {mode, s.label(), cs[i].name, fmt(ms, 3),
                                        fmt(s.gemm_flops() / t[i] / 1e12, gpu ? 0 : 3), fmt(r["none"] / t[i], 2) + "x"};
        if (!bf16_act) row.push_back(fmt(r["bf16"] / t[i], 2) + "x");
        row.push_back(mode == "linear" ? fmt(r["bf16_gemms"] / t[i], 2) + "x" : "-");
        row.push_back(sci(err_out[i]));
        row.push_back(sci(err_grad[i]));
        table.add(row);
        if (csv != nullptr) {
          std::fprintf(csv, "%s,%s,%lld,%lld,%lld,%s,%.6f,%.6g,%.6g\n", mode.c_str(), act_name(act),
                       static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(s.n),
                       cs[i].name.c_str(), ms, err_out[i], err_grad[i]);
        }
      }
    }
  }
  if (csv != nullptr) std::fclose(csv);
  table.print();
  std::printf("vs X: X's time / this row's time (> 1: this row is faster)%s\n",
              bf16_act ? "; activations bf16: none is the bf16 linear (bf16 GEMMs), the baseline of the fp8 rows" : "");
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());

  // Issue 8's target: Float8Linear forward + backward >= 1.4x bf16 at M=16384, K=N=8192.
  const std::string target = Shape{16384, 8192, 8192}.label();
  for (const char* mode : {"step", "linear"}) {
    auto it = results.find({mode, target});
    if (it == results.end()) continue;
    auto& r = it->second;
    std::string line;
    for (const Recipe& rc : kFp8Recipes) {
      if (r.count(rc.name) == 0) continue;  // left out on this shape or backend (noted above)
      const double ratio = r[baseline] / r[rc.name];
      line += std::string(" ") + rc.name + " " + fmt(ratio, 2) + "x (" + (ratio >= 1.4 ? "met" : "missed") + ")";
    }
    std::printf("target (fp8 >= 1.40x bf16 at %s), mode %s, activations %s, vs our bf16 linear (%s):%s\n",
                target.c_str(), mode, act_name(act),
                bf16_act ? "none: recipe none with bf16 activations" : "bf16: autocast-style, fp32 activations",
                line.c_str());
    if (std::string(mode) == "linear") {
      line.clear();
      for (const Recipe& rc : kFp8Recipes) {
        if (r.count(rc.name) == 0) continue;
        line += std::string(" ") + rc.name + " " + fmt(r["bf16_gemms"] / r[rc.name], 2) + "x";
      }
      std::printf("target (fp8 >= 1.40x bf16 at %s), mode linear, activations %s, vs the bare bf16 GEMMs "
                  "(bf16_gemms, a lower bound):%s\n",
                  target.c_str(), act_name(act), line.c_str());
    }
  }
  if (gpu) {
    std::printf("reference: torchao ln->linear->sigmoid vs bf16 (compiled): 1.43-1.51x at 8192^2, 1.80-1.88x at "
                "16384^2; bench/torch_linear.py --ours <csv> times PyTorch's bf16 side by side\n");
  }
  if (suspicious) std::printf("WARNING: some contender's result differs from recipe none's more than expected\n");
  return 0;
}

}  // namespace
}  // namespace fp8::bench

int main(int argc, char** argv) {
  fp8::bench::apply_threads_from_environment();
  return fp8::bench::run(argc, argv);
}
