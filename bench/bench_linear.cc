// bench_linear: one training step of a Float8Linear layer per fp8 recipe against the same
// layer with recipe `none` (every GEMM in fp32), side by side in one run. The GEMM
// speedups of bench_gemm are an upper bound; what a model gains is that minus the casts,
// transposes and scale bookkeeping the layer adds around its three GEMMs, and this
// measures the layer whole.
//
// The workload is torchao's "ln -> linear -> sigmoid" microbenchmark at square shapes
// (tokens = in_features = out_features = D), so the ratios sit next to its published ones
// (REFERENCE.md, speed anchors). One iteration, the loss being the sum of the outputs:
//   RMSNorm forward, linear forward, sigmoid forward,
//   sigmoid backward, linear backward (grad_input and grad_weight), RMSNorm backward,
//   finish_step() (where delayed scaling updates its histories and scales).
// On CUDA there are no model ops yet, so there only the linear forward + backward (from a
// fixed upstream gradient) and finish_step() are timed; the table title says which.
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "fp8/model_ops.h"
#include "worker/engine/cast_config.h"
#include "worker/engine/float8_linear.h"

namespace fp8::bench {
namespace {

using engine::Float8Linear;

constexpr const char* kUsage =
    "usage: bench_linear [--device cpu|cuda] [--quick] [--max-size N] [--csv FILE]\n"
    "  Times one forward+backward step of Float8Linear in torchao's ln -> linear -> sigmoid\n"
    "  microbenchmark at square shapes, per fp8 recipe, against recipe none (fp32 GEMMs),\n"
    "  and prints the fp8 speedup.";

struct Recipe {
  const char* name;
  v1::Fp8Spec::Recipe recipe;
};
constexpr Recipe kBaseline = {"none", v1::Fp8Spec::NONE};
constexpr Recipe kRecipes[] = {{"tensorwise", v1::Fp8Spec::TENSORWISE},
                               {"rowwise", v1::Fp8Spec::ROWWISE},
                               {"rowwise_with_gw_hp", v1::Fp8Spec::ROWWISE_WITH_GW_HP},
                               {"delayed", v1::Fp8Spec::DELAYED}};

std::vector<int64_t> sizes_for(const Options& o, bool gpu) {
  std::vector<int64_t> s = gpu ? std::vector<int64_t>{4096, 8192, 16384} : std::vector<int64_t>{512, 1024, 2048};
  if (o.quick) s = gpu ? std::vector<int64_t>{4096, 8192} : std::vector<int64_t>{256, 512, 1024};
  std::vector<int64_t> kept;
  for (int64_t d : s) {
    if (o.max_size == 0 || d <= o.max_size) kept.push_back(d);
  }
  return kept;
}

std::unique_ptr<Float8Linear> make_layer(Backend& b, int64_t d, const Recipe& r) {
  auto config = engine::recipe_config(r.recipe);
  check(config.status(), r.name);
  auto layer = Float8Linear::create(b, d, d, *config);
  check(layer.status(), r.name);
  return std::move(*layer);
}

// The activations and gradients of one ln -> linear -> sigmoid step at D x D, shared by
// every layer under test (each step overwrites what it reads, apart from the parameters'
// accumulated gradients).
struct Step {
  Step(Backend& b, int64_t d)
      : d(d), x(b, bytes(d * d)), norm_w(b, bytes(d)), inv_rms(b, bytes(d)), normed(b, bytes(d * d)),
        w(b, bytes(d * d)), y(b, bytes(d * d)), s(b, bytes(d * d)), grad_y(b, bytes(d * d)),
        grad_normed(b, bytes(d * d)), grad_x(b, bytes(d * d)), grad_w(b, bytes(d * d)), grad_norm_w(b, bytes(d)) {
    fill_gaussian(x, d * d, 1);
    fill_gaussian(w, d * d, 2);
    fill_gaussian(grad_y, d * d, 3);  // the fixed upstream gradient where there is no sigmoid
    const std::vector<float> ones(static_cast<size_t>(d), 1.0f), zeros(static_cast<size_t>(d * d), 0.0f);
    norm_w.upload(ones.data(), bytes(d));
    grad_norm_w.upload(zeros.data(), bytes(d));
    grad_w.upload(zeros.data(), bytes(d * d));
  }
  static size_t bytes(int64_t floats) { return static_cast<size_t>(floats) * sizeof(float); }

  // CPU: the whole ln -> linear -> sigmoid step (host memory, model ops on the CPU).
  void full(Float8Linear& layer) {
    ModelOps& ops = cpu_model_ops();
    constexpr float kEps = 1e-5f;
    check(ops.rmsnorm_forward(x.as<float>(), norm_w.as<float>(), d, d, kEps, normed.as<float>(), inv_rms.as<float>()),
          "rmsnorm_forward");
    check(layer.forward(normed.as<float>(), d, w.as<float>(), nullptr, y.as<float>()), "forward");
    const int64_t n = d * d;
    float* sp = s.as<float>();
    const float* yp = y.as<float>();
    for (int64_t i = 0; i < n; ++i) sp[i] = 1.0f / (1.0f + std::exp(-yp[i]));
    // d(sum of sigmoid(y))/dy = s (1 - s).
    float* gp = grad_y.as<float>();
    for (int64_t i = 0; i < n; ++i) gp[i] = sp[i] * (1.0f - sp[i]);
    check(layer.backward(grad_y.as<float>(), grad_normed.as<float>(), grad_w.as<float>(), nullptr), "backward");
    check(ops.rmsnorm_backward(x.as<float>(), norm_w.as<float>(), inv_rms.as<float>(), grad_normed.as<float>(), d, d,
                               grad_x.as<float>(), grad_norm_w.as<float>()),
          "rmsnorm_backward");
    check(layer.finish_step(), "finish_step");
  }

  // CUDA: the linear layer alone, from a fixed upstream gradient.
  void linear_only(Float8Linear& layer) {
    check(layer.forward(x.as<float>(), d, w.as<float>(), nullptr, y.as<float>()), "forward");
    check(layer.backward(grad_y.as<float>(), grad_x.as<float>(), grad_w.as<float>(), nullptr), "backward");
    check(layer.finish_step(), "finish_step");
  }

  int64_t d;
  DeviceBuffer x, norm_w, inv_rms, normed, w, y, s, grad_y, grad_normed, grad_x, grad_w, grad_norm_w;
};

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv, kUsage);
  Backend& b = open_backend(o);
  const bool gpu = b.is_cuda();

  std::printf("# bench_linear %s on %s (backend %s)\n", today().c_str(), machine_peaks(b).machine.c_str(),
              b.name().c_str());
  std::printf("# ms per training step of %s; tokens = in = out = D\n",
              gpu ? "Float8Linear alone: forward, backward, finish_step (no model ops on CUDA yet: no norm, no sigmoid)"
                  : "ln -> linear -> sigmoid: RMSNorm, Float8Linear and sigmoid forward and backward, finish_step");
  std::printf("# baseline: the same step with recipe none (fp32 GEMMs%s), timed interleaved with the fp8 recipes\n",
              gpu ? ", no TF32: not torchao's bf16 baseline" : "");

  std::FILE* csv = o.csv.empty() ? nullptr : std::fopen(o.csv.c_str(), "w");
  if (!o.csv.empty() && csv == nullptr) die("cannot write " + o.csv);
  if (csv != nullptr) std::fprintf(csv, "d,recipe,fp8_ms,none_ms\n");

  Table table({"shape (D^3)", "recipe", "fp8 ms", "none ms", "speedup (none/fp8)"});
  for (int64_t d : sizes_for(o, gpu)) {
    Step step(b, d);
    // The baseline first, then one layer per recipe; all timed interleaved, so machine
    // noise hits them alike.
    std::vector<std::unique_ptr<Float8Linear>> layers;
    layers.push_back(make_layer(b, d, kBaseline));
    for (const Recipe& r : kRecipes) layers.push_back(make_layer(b, d, r));
    std::vector<std::function<void()>> fns;
    for (auto& l : layers) {
      Float8Linear* layer = l.get();
      fns.push_back([&step, layer, gpu] { gpu ? step.linear_only(*layer) : step.full(*layer); });
    }
    // One untimed step sizes the batches: short ones, as five layers take turns.
    const double estimate = time_it(b, fns[0], 1, 1, 1);
    const std::vector<double> t = time_interleaved(b, fns, iterations_for(estimate, 0.05), o.quick ? 5 : 7, 1);

    const std::string shape = std::to_string(d);
    for (size_t i = 0; i < std::size(kRecipes); ++i) {
      const double fp8 = t[i + 1], none = t[0];
      table.add({shape, kRecipes[i].name, fmt(fp8 * 1e3, 2), fmt(none * 1e3, 2), fmt(none / fp8, 2) + "x"});
      if (csv != nullptr) {
        std::fprintf(csv, "%lld,%s,%.6f,%.6f\n", static_cast<long long>(d), kRecipes[i].name, fp8 * 1e3, none * 1e3);
      }
    }
  }
  if (csv != nullptr) std::fclose(csv);
  table.print();
  if (gpu) {
    std::printf("reference: torchao ln->linear->sigmoid vs bf16 (compiled): 1.43-1.51x at 8192^2, 1.80-1.88x at "
                "16384^2\n");
  }
  return 0;
}

}  // namespace
}  // namespace fp8::bench

int main(int argc, char** argv) { return fp8::bench::run(argc, argv); }
