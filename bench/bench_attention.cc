// bench_attention: causal grouped-query attention, forward and backward, in bf16, per CUDA
// implementation side by side in one run: the tensor-core kernels on mma.sync with every
// tile in registers (mma; the default before sm_90), the same on Hopper's warpgroup MMA
// (wgmma, the default on sm_90 for head_dim 64 and 128; elsewhere it is mma), and the
// fp32 SIMT kernels (simt). Prints ms,
// TFLOP/s and the fraction of the GPU's dense bf16 peak, each implementation's speed
// against the first's (mma by default), and how far its
// results are from simt's (relative L2 difference of out, grad_q, grad_k, grad_v; simt is
// fp32 throughout): a kernel that is fast and wrong shows. bench/torch_attention.py times
// PyTorch's scaled_dot_product_attention on the same shapes.
//
//   bench_attention --device cuda [--shapes B:S:H:KV:D,...] [--kernels mma,wgmma,simt] [--csv FILE]
//   bench_attention [--device cpu]      the CPU's attention on a small shape (checks the wiring)
//
// Each implementation has model ops of its own (CudaModelOpsOptions::attention) on one
// stream, so the contenders take turns within each timing round.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_device.h"
#include "bench/bench_util.h"
#include "fp8/arith.h"
#include "fp8/model_ops.h"
#include "worker/engine/tensor/device.h"

namespace fp8::bench {
namespace {

constexpr const char* kUsage =
    "usage: bench_attention [--device cpu|cuda] [--shapes B:S:H:KV:D,...] [--kernels mma,wgmma,simt] [--csv FILE]\n"
    "  Times causal GQA attention forward and backward in bf16 (batch B, sequence S, H query heads, KV kv\n"
    "  heads, head_dim D) per CUDA implementation, side by side. Default shapes on cuda: llama-h100's\n"
    "  4:2048:32:8:64, 1:8192:32:8:64 and 4:2048:16:16:128; on cpu 1:256:4:2:64.";

struct Shape {
  AttentionShape s;
  std::string label() const {
    return std::to_string(s.batch) + ":" + std::to_string(s.seq) + ":" + std::to_string(s.n_heads) + ":" +
           std::to_string(s.n_kv_heads) + ":" + std::to_string(s.head_dim);
  }
  // FLOPs of the causal forward: Q·Kᵀ and P·V, 2·S²·D each per head, half of them masked.
  double forward_flops() const {
    return 2.0 * 2.0 * static_cast<double>(s.batch * s.n_heads) * static_cast<double>(s.seq) *
           static_cast<double>(s.seq) * static_cast<double>(s.head_dim) / 2.0;
  }
  // The backward's useful products (S recomputed, dP, dV, dK, dQ): 2.5 forwards, as
  // FlashAttention counts it.
  double backward_flops() const { return 2.5 * forward_flops(); }
};

struct AttentionOptions {
  std::vector<Shape> shapes;
  std::vector<std::string> kernels;
};

Shape parse_shape(const std::string& text) {
  std::vector<int64_t> v;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find(':', start);
    const std::string part = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    char* rest = nullptr;
    const long long x = std::strtoll(part.c_str(), &rest, 10);
    if (part.empty() || *rest != '\0' || x <= 0) die("--shapes: '" + text + "' is not B:S:H:KV:D with positive sizes");
    v.push_back(x);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (v.size() != 5) die("--shapes: '" + text + "' is not B:S:H:KV:D");
  Shape s{{v[0], v[1], v[2], v[3], v[4]}};
  if (s.s.n_heads % s.s.n_kv_heads != 0) die("--shapes: '" + text + "': H must be a multiple of KV");
  return s;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

// Takes bench_attention's own flags out of argv (the rest go to parse_options).
AttentionOptions take_attention_options(int& argc, char** argv) {
  AttentionOptions ao;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shapes" && i + 1 < argc) {
      for (const auto& s : split(argv[++i], ',')) ao.shapes.push_back(parse_shape(s));
    } else if (a == "--kernels" && i + 1 < argc) {
      ao.kernels = split(argv[++i], ',');
      for (const auto& k : ao.kernels) {
        if (k != "simt" && k != "mma" && k != "wgmma") die("--kernels: '" + k + "' is none of mma, wgmma, simt");
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return ao;
}

// Model ops whose attention runs on `kernel`'s kernels, sharing the device's stream; on
// the CPU, the device's own.
ModelOps& ops_for(const engine::Device& dev, const std::string& kernel, std::vector<std::unique_ptr<ModelOps>>& owned) {
  if (!dev.is_cuda()) {
    absl::StatusOr<ModelOps*> ops = dev.model_ops();
    check(ops.status(), "model ops");
    return **ops;
  }
  absl::StatusOr<CudaModelOpsOptions::Attention> attention = parse_cuda_attention_kernels(kernel);
  check(attention.status(), "--kernels");
  CudaModelOpsOptions options;
  options.attention = *attention;
  absl::StatusOr<std::unique_ptr<ModelOps>> ops = make_cuda_model_ops(dev.ordinal(), dev.stream(), options);
  check(ops.status(), "CUDA model ops");
  owned.push_back(std::move(*ops));
  return *owned.back();
}

// Uniform values in [-scale, scale] as bf16 bits, into backend memory.
void fill_bf16(DeviceBuffer& buf, int64_t n, uint32_t seed, float scale) {
  std::vector<uint16_t> host(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (auto& h : host) {
    x = x * 1664525u + 1013904223u;
    const float u = static_cast<float>(x >> 8) / static_cast<float>(1u << 24);  // [0, 1)
    h = float_to_bf16((2.0f * u - 1.0f) * scale);
  }
  buf.upload(host.data(), host.size() * sizeof(uint16_t));
}

std::vector<float> download_bf16(Backend& b, const DeviceBuffer& buf, int64_t n) {
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  check(b.copy_to_host(bits.data(), buf.as<void>(), bits.size() * sizeof(uint16_t)), "download");
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(err / std::max(norm, 1e-30));
}

struct Buffers {
  Buffers(Backend& b, const AttentionShape& s)
      : qn(s.batch * s.seq * s.n_heads * s.head_dim), kvn(s.batch * s.seq * s.n_kv_heads * s.head_dim),
        ln(s.batch * s.n_heads * s.seq), q(b, bytes(qn)), k(b, bytes(kvn)), v(b, bytes(kvn)), out(b, bytes(qn)),
        grad_out(b, bytes(qn)), grad_q(b, bytes(qn)), grad_k(b, bytes(kvn)), grad_v(b, bytes(kvn)),
        lse(b, static_cast<size_t>(ln) * sizeof(float)) {
    // Scores of a few units, as in a trained model: softmax neither flat nor one-hot.
    fill_bf16(q, qn, 1, 2.0f);
    fill_bf16(k, kvn, 2, 2.0f);
    fill_bf16(v, kvn, 3, 1.0f);
    fill_bf16(grad_out, qn, 4, 1.0f);
  }
  static size_t bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(uint16_t); }
  int64_t qn, kvn, ln;
  DeviceBuffer q, k, v, out, grad_out, grad_q, grad_k, grad_v;
  DeviceBuffer lse;
};

struct Result {
  std::string kernel;
  double forward_s = 0, backward_s = 0;
  double err = 0;  // worst relative L2 of out, grad_q, grad_k, grad_v against the reference kernel
};

int run(int argc, char** argv) {
  AttentionOptions ao = take_attention_options(argc, argv);
  const Options o = parse_options(argc, argv, kUsage);
  std::unique_ptr<engine::Device> cuda;
  const engine::Device* dev = &open_engine_device(o.device == "cuda", cuda);
  const bool gpu = dev->is_cuda();
  Backend& b = dev->backend();
  if (ao.shapes.empty()) {
    ao.shapes = gpu ? std::vector<Shape>{parse_shape("4:2048:32:8:64"), parse_shape("1:8192:32:8:64"),
                                         parse_shape("4:2048:16:16:128")}
                    : std::vector<Shape>{parse_shape("1:256:4:2:64")};
  }
  if (!gpu) ao.kernels = {"cpu"};
  if (ao.kernels.empty()) ao.kernels = {"mma", "wgmma", "simt"};
  size_t reference = 0;
  std::vector<std::unique_ptr<ModelOps>> owned_ops;
  std::vector<ModelOps*> kernel_ops;  // one per kernel, in ao.kernels' order
  for (size_t k = 0; k < ao.kernels.size(); ++k) {
    if (ao.kernels[k] == "simt") reference = k;
    kernel_ops.push_back(&ops_for(*dev, ao.kernels[k], owned_ops));
  }
  const Peaks peaks = machine_peaks(b);

  std::printf("# bench_attention %s on %s (backend %s): causal GQA attention, bf16 activations\n", today().c_str(),
              peaks.machine.c_str(), b.name().c_str());
  std::printf("# shape B:S:H:KV:D; TFLOP/s: forward 2·B·H·S²·D (causal half of Q·Kᵀ and P·V), backward 2.5x that; "
              "%% peak against %s %.3g TFLOP/s\n",
              gpu ? "dense bf16" : "the fp32 peak", peaks.hp_tflops);
  std::printf("# kernels: mma (tensor cores, mma.sync), wgmma (the same on Hopper's wgmma, the default on "
              "sm_90), simt (fp32 SIMT); "
              "they take turns in each timing round (median of 7)\n");
  std::printf("# err: worst relative L2 difference of out, grad_q, grad_k, grad_v from %s's\n",
              ao.kernels[reference].c_str());
  Table table({"shape", "kernel", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s", "fwd+bwd % peak",
               "vs " + ao.kernels.front(), "err vs " + ao.kernels[reference]});
  std::ofstream csv;
  if (!o.csv.empty()) {
    csv.open(o.csv);
    if (!csv) die("cannot write " + o.csv);
    csv << "batch,seq,n_heads,n_kv_heads,head_dim,kernel,forward_ms,backward_ms,err\n";
  }

  for (const Shape& shape : ao.shapes) {
    const AttentionShape& s = shape.s;
    Buffers buf(b, s);
    auto forward = [&](ModelOps& ops) {
      check(ops.attention_forward(s, buf.q.as<void>(), buf.k.as<void>(), buf.v.as<void>(), buf.out.as<void>(),
                                  buf.lse.as<float>(), DType::kBFloat16),
            "attention forward");
    };
    auto backward = [&](ModelOps& ops) {
      check(ops.attention_backward(s, buf.q.as<void>(), buf.k.as<void>(), buf.v.as<void>(), buf.out.as<void>(),
                                   buf.lse.as<float>(), buf.grad_out.as<void>(), buf.grad_q.as<void>(),
                                   buf.grad_k.as<void>(), buf.grad_v.as<void>(), DType::kBFloat16),
            "attention backward");
    };
    // Each kernel's results once, against the reference kernel's: simt where it runs (fp32
    // throughout, bf16 only on store), else the first.
    std::vector<Result> results;
    std::vector<std::vector<std::vector<float>>> outputs;
    for (size_t k = 0; k < ao.kernels.size(); ++k) {
      forward(*kernel_ops[k]);
      backward(*kernel_ops[k]);
      check(b.synchronize(), "synchronize");
      outputs.push_back({download_bf16(b, buf.out, buf.qn), download_bf16(b, buf.grad_q, buf.qn),
                         download_bf16(b, buf.grad_k, buf.kvn), download_bf16(b, buf.grad_v, buf.kvn)});
      results.push_back({ao.kernels[k]});
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (k == reference) continue;
      for (size_t i = 0; i < outputs[k].size(); ++i) {
        results[k].err = std::max(results[k].err, relative_l2(outputs[k][i], outputs[reference][i]));
      }
    }
    outputs.clear();
    // One forward per contender leaves out and lse as that contender wrote them; the
    // backward reads them, so each backward is timed after its own forward in the round.
    const double estimate = gpu ? 5e-3 : 0.5;
    const int iters = std::max(1, iterations_for(estimate, gpu ? 0.1 : 0.5));
    std::vector<std::function<void()>> fns;
    for (ModelOps* ops : kernel_ops) {
      fns.push_back([&, ops] { forward(*ops); });
      fns.push_back([&, ops] { backward(*ops); });
    }
    const std::vector<double> t = time_interleaved(b, fns, iters, o.quick ? 3 : 7, 1);
    for (size_t i = 0; i < results.size(); ++i) {
      results[i].forward_s = t[2 * i];
      results[i].backward_s = t[2 * i + 1];
    }
    const double base = results.front().forward_s + results.front().backward_s;
    for (const Result& r : results) {
      const double f_tflops = shape.forward_flops() / r.forward_s / 1e12;
      const double b_tflops = shape.backward_flops() / r.backward_s / 1e12;
      const double both = (shape.forward_flops() + shape.backward_flops()) / (r.forward_s + r.backward_s) / 1e12;
      char err[32];
      std::snprintf(err, sizeof err, "%.1e", r.err);
      const int decimals = gpu ? 1 : 3;
      table.add({shape.label(), r.kernel, fmt(r.forward_s * 1e3, 3), fmt(f_tflops, decimals),
                 fmt(r.backward_s * 1e3, 3), fmt(b_tflops, decimals), peaks.hp_tflops > 0 ? fmt(100.0 * both / peaks.hp_tflops, 1) + "%" : "-",
                 fmt(base / (r.forward_s + r.backward_s), 2) + "x", &r == &results[reference] ? "-" : err});
      if (csv) {
        csv << s.batch << "," << s.seq << "," << s.n_heads << "," << s.n_kv_heads << "," << s.head_dim << ","
            << r.kernel << "," << r.forward_s * 1e3 << "," << r.backward_s * 1e3 << "," << r.err << "\n";
      }
    }
  }
  table.print();
  std::printf("vs %s: its fwd+bwd time / this row's (> 1: faster)\n", ao.kernels.front().c_str());
  return 0;
}

}  // namespace
}  // namespace fp8::bench

int main(int argc, char** argv) {
  fp8::bench::apply_threads_from_environment();
  return fp8::bench::run(argc, argv);
}
