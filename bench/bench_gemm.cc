// bench_gemm: the fp8 scaled GEMM against the high-precision baseline on the same
// machine, side by side in one run: bf16 cuBLASLt on a GPU, fp32 OpenBLAS sgemm on CPU.
// Square shapes and the linear layers of Llama models, out[M, N] = X[M, K] · W[N, K]ᵀ.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace fp8::bench {
namespace {

constexpr const char* kUsage =
    "usage: bench_gemm [--device cpu|cuda] [--quick] [--max-size N] [--csv FILE]\n"
    "  Times out = X·Wᵀ in fp8 (tensorwise, rowwise and blockwise scales) and in the\n"
    "  high-precision baseline (bf16 on cuda, fp32 on cpu), and prints TFLOP/s, the fp8\n"
    "  speedups and the fraction of the machine's peak.\n"
    "  blockwise: X at 1x128 tiles, W at 128x128 blocks (DeepSeek-V3); only shapes whose K\n"
    "  is a multiple of 128, and only on backends that take block scales (a note says why\n"
    "  a row has none).";

struct Shape {
  std::string name;
  int64_t m, n, k;
};

std::vector<Shape> shapes_for(const Options& o, bool gpu) {
  std::vector<Shape> s;
  std::vector<int64_t> square = gpu ? std::vector<int64_t>{256, 512, 1024, 2048, 4096, 8192, 16384}
                                    : std::vector<int64_t>{256, 512, 1024, 2048};
  if (o.quick) square = gpu ? std::vector<int64_t>{1024, 4096, 8192} : std::vector<int64_t>{256, 512, 1024};
  for (int64_t d : square) s.push_back({std::to_string(d) + "^3", d, d, d});
  // Llama linear layers (K -> N) at a token batch M: 8B has dim 4096, FFN 14336, GQA
  // wqkv 4096 -> 6144; 70B has dim 8192, FFN 28672.
  const int64_t tokens = gpu ? 16384 : (o.quick ? 128 : 256);
  const std::string t = std::to_string(tokens);
  s.push_back({"llama3-8b wqkv M=" + t, tokens, 6144, 4096});
  s.push_back({"llama3-8b w1/w3 M=" + t, tokens, 14336, 4096});
  s.push_back({"llama3-8b w2 M=" + t, tokens, 4096, 14336});
  if (gpu && !o.quick) {
    s.push_back({"llama3-70b w1/w3 M=" + t, tokens, 28672, 8192});
    s.push_back({"llama3-70b w2 M=" + t, tokens, 8192, 28672});
  }
  std::vector<Shape> kept;
  for (const auto& x : s) {
    if (o.max_size == 0 || (x.m <= o.max_size && x.n <= o.max_size && x.k <= o.max_size)) kept.push_back(x);
  }
  return kept;
}

// An fp8 operand quantized on the backend, with its dequantization factors (one per
// scale_count entry: a block-scaled operand has one per tile or block, padding included).
struct Fp8Operand {
  Fp8Operand(Backend& b, int64_t rows, int64_t k, Granularity g)
      : rows(rows), k(k), codes(b, static_cast<size_t>(rows * k)),
        inv_scale(b, static_cast<size_t>(scale_count(g, rows, k)) * sizeof(float)), gran(g) {}
  // The backend's own status rather than a check: a backend may refuse a granularity (the
  // CUDA backend has no block scaling yet), and the benchmark then leaves that row out.
  absl::Status quantize(Backend& b, const DeviceBuffer& src) {
    const int64_t ns = scale_count(gran, rows, k);
    DeviceBuffer scale(b, static_cast<size_t>(ns) * sizeof(float));
    QuantizeArgs q;
    q.input = {src.as<float>(), DType::kFloat32, rows, k};
    q.granularity = gran;
    q.out = codes.as<uint8_t>();
    q.scale_out = scale.as<float>();
    if (absl::Status st = b.quantize(q); !st.ok()) return st;
    std::vector<float> s(static_cast<size_t>(ns));
    check(b.copy_to_host(s.data(), scale.as<float>(), s.size() * sizeof(float)), "download scales");
    for (auto& v : s) v = 1.0f / v;
    inv_scale.upload(s.data(), s.size() * sizeof(float));
    return absl::OkStatus();
  }
  ScaledOperand operand() const { return {codes.as<uint8_t>(), Format::kE4M3, gran, inv_scale.as<float>()}; }

  int64_t rows, k;
  DeviceBuffer codes;
  DeviceBuffer inv_scale;
  Granularity gran;
};

// "-" for a contender that did not run on this shape.
std::string cell(double v, int decimals, const char* suffix = "") {
  return v > 0 ? fmt(v, decimals) + suffix : "-";
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv, kUsage);
  Backend& b = open_backend(o);
  const bool gpu = b.is_cuda();
  const Peaks peaks = machine_peaks(b);
  const DType hp = gpu ? DType::kBFloat16 : DType::kFloat32;
  const char* hp_name = gpu ? "bf16" : "fp32";

  std::printf("# bench_gemm %s on %s (backend %s)\n", today().c_str(), peaks.machine.c_str(), b.name().c_str());
  std::printf("# baseline: %s GEMM (%s); fp8: e4m3 x e4m3, fp32 accumulation%s, %s output\n", hp_name,
              gpu ? "cuBLASLt" : "OpenBLAS sgemm", gpu ? " with fast accumulation" : "", gpu ? "bf16" : "fp32");
  if (peaks.hp_tflops > 0) {
    std::printf("# peaks used for %%peak: %s %.*f TFLOP/s%s\n", hp_name, peaks.hp_tflops < 10 ? 3 : 0, peaks.hp_tflops,
                peaks.fp8_tflops > 0 ? (", fp8 " + fmt(peaks.fp8_tflops, 0) + " TFLOP/s").c_str() : "");
  }

  std::printf("# fp8 tw: both operands tensorwise; rw: rowwise (X per row, W per output column); bw: blockwise, "
              "X 1x128 tiles x W 128x128 blocks, each 128-wide K block's sum scaled and added\n");

  Table table({"shape", "M", "N", "K", std::string(hp_name) + " ms", std::string(hp_name) + " TFLOP/s",
               "fp8 tw ms", "fp8 tw TFLOP/s", "tw speedup", "fp8 rw ms", "fp8 rw TFLOP/s", "rw speedup",
               "fp8 bw ms", "fp8 bw TFLOP/s", "bw speedup", "bw vs tw", "bw vs rw",
               std::string(hp_name) + " %peak", gpu ? "fp8 %peak" : "fp8 %fp32peak"});
  double tw_speedup_8192 = 0, cost_2048 = 0, bw_cost_2048 = 0;
  std::vector<std::string> notes;
  // Once the backend refuses block scales, the later shapes are not tried again.
  std::string block_refused;
  std::FILE* csv = o.csv.empty() ? nullptr : std::fopen(o.csv.c_str(), "w");
  if (!o.csv.empty() && csv == nullptr) die("cannot write " + o.csv);
  // fp8_blockwise_ms is empty where blockwise did not run (the column is last, so readers
  // of the older columns by name are unaffected).
  if (csv != nullptr) std::fprintf(csv, "shape,m,n,k,hp_ms,fp8_tensorwise_ms,fp8_rowwise_ms,fp8_blockwise_ms\n");
  for (const auto& s : shapes_for(o, gpu)) {
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    DeviceBuffer x(b, static_cast<size_t>(s.m * s.k) * 4), w(b, static_cast<size_t>(s.n * s.k) * 4);
    fill_gaussian(x, s.m * s.k, 1);
    fill_gaussian(w, s.n * s.k, 2);

    // Baseline operands in the baseline's dtype.
    DeviceBuffer xh(b, static_cast<size_t>(s.m * s.k) * dtype_size(hp)), wh(b, static_cast<size_t>(s.n * s.k) * dtype_size(hp));
    check(b.convert(x.as<void>(), DType::kFloat32, xh.as<void>(), hp, s.m * s.k), "convert");
    check(b.convert(w.as<void>(), DType::kFloat32, wh.as<void>(), hp, s.n * s.k), "convert");
    DeviceBuffer out(b, static_cast<size_t>(s.m * s.n) * dtype_size(hp));
    GemmArgs g;
    g.m = s.m;
    g.n = s.n;
    g.k = s.k;
    g.a = xh.as<void>();
    g.b = wh.as<void>();
    g.in_dtype = hp;
    g.trans_b = true;
    g.out_dtype = hp;
    g.out = out.as<void>();

    Fp8Operand xt(b, s.m, s.k, Granularity::kTensorwise), wt(b, s.n, s.k, Granularity::kTensorwise);
    Fp8Operand xr(b, s.m, s.k, Granularity::kRowwise), wr(b, s.n, s.k, Granularity::kRowwise);
    check(xt.quantize(b, x), "quantize");
    check(wt.quantize(b, w), "quantize");
    check(xr.quantize(b, x), "quantize");
    check(wr.quantize(b, w), "quantize");
    // Blockwise as ScaledGemmArgs takes it: activations X in 1x128 tiles, weights W (B
    // given as Wᵀ [N, K]) in 128x128 blocks, both stepping along K by 128.
    std::unique_ptr<Fp8Operand> xb, wb;
    if (s.k % kScaleBlock != 0) {
      notes.push_back("blockwise skipped for " + s.name + ": K=" + std::to_string(s.k) + " is not a multiple of " +
                      std::to_string(kScaleBlock) + " (block-scaled GEMMs contract in whole 128-wide blocks)");
    } else if (block_refused.empty()) {
      xb = std::make_unique<Fp8Operand>(b, s.m, s.k, Granularity::kBlock1x128);
      wb = std::make_unique<Fp8Operand>(b, s.n, s.k, Granularity::kBlock128x128);
      absl::Status st = xb->quantize(b, x);
      if (st.ok()) st = wb->quantize(b, w);
      if (!st.ok()) {
        block_refused = std::string(st.message());
        xb.reset();
        wb.reset();
      }
    }
    auto scaled = [&](const Fp8Operand& a, const Fp8Operand& bb) {
      ScaledGemmArgs sg;
      sg.m = s.m;
      sg.n = s.n;
      sg.k = s.k;
      sg.a = a.operand();
      sg.b = bb.operand();
      sg.out_dtype = hp;
      sg.out = out.as<void>();
      sg.fast_accum = true;
      return sg;
    };
    const ScaledGemmArgs tw = scaled(xt, wt), rw = scaled(xr, wr);
    ScaledGemmArgs bw;
    if (xb) {
      bw = scaled(*xb, *wb);
      // One trial call: a backend that quantizes block scales may still refuse the GEMM.
      if (absl::Status st = b.scaled_gemm(bw); !st.ok()) {
        block_refused = std::string(st.message());
        xb.reset();
        wb.reset();
      }
    }

    // One untimed call sizes the batches.
    const double estimate = time_it(b, [&] { check(b.gemm(g), "gemm"); }, 1, 1, 1);
    const int iters = iterations_for(estimate);
    std::vector<std::function<void()>> fns = {[&] { check(b.gemm(g), "gemm"); },
                                              [&] { check(b.scaled_gemm(tw), "scaled_gemm"); },
                                              [&] { check(b.scaled_gemm(rw), "scaled_gemm"); }};
    if (xb) fns.push_back([&] { check(b.scaled_gemm(bw), "scaled_gemm blockwise"); });
    const auto t = time_interleaved(b, fns, iters);
    const double t_hp = t[0], t_tw = t[1], t_rw = t[2], t_bw = xb ? t[3] : 0;

    const double tf_hp = flops / t_hp / 1e12, tf_tw = flops / t_tw / 1e12, tf_rw = flops / t_rw / 1e12;
    const double tf_bw = xb ? flops / t_bw / 1e12 : 0;
    const double fp8_peak = gpu ? peaks.fp8_tflops : peaks.hp_tflops;
    table.add({s.name, std::to_string(s.m), std::to_string(s.n), std::to_string(s.k), fmt(t_hp * 1e3, 3),
               fmt(tf_hp, tf_hp < 1 ? 3 : 1), fmt(t_tw * 1e3, 3), fmt(tf_tw, tf_tw < 1 ? 3 : 1), fmt(t_hp / t_tw, 2) + "x",
               fmt(t_rw * 1e3, 3), fmt(tf_rw, tf_rw < 1 ? 3 : 1), fmt(t_hp / t_rw, 2) + "x", cell(t_bw * 1e3, 3),
               cell(tf_bw, tf_bw < 1 ? 3 : 1), cell(xb ? t_hp / t_bw : 0, 2, "x"), cell(xb ? t_tw / t_bw : 0, 2, "x"),
               cell(xb ? t_rw / t_bw : 0, 2, "x"),
               peaks.hp_tflops > 0 ? fmt(100 * tf_hp / peaks.hp_tflops, 0) + "%" : "n/a",
               fp8_peak > 0 ? fmt(100 * tf_tw / fp8_peak, 0) + "%" : "n/a"});
    if (csv != nullptr) {
      std::fprintf(csv, "%s,%lld,%lld,%lld,%.6f,%.6f,%.6f,%s\n", s.name.c_str(), static_cast<long long>(s.m),
                   static_cast<long long>(s.n), static_cast<long long>(s.k), t_hp * 1e3, t_tw * 1e3, t_rw * 1e3,
                   xb ? fmt(t_bw * 1e3, 6).c_str() : "");
    }
    if (s.m == 8192 && s.n == 8192 && s.k == 8192) tw_speedup_8192 = t_hp / t_tw;
    if (s.m == 2048 && s.n == 2048 && s.k == 2048) {
      cost_2048 = t_tw / t_hp;
      if (xb) bw_cost_2048 = t_bw / t_hp;
    }
  }
  if (csv != nullptr) std::fclose(csv);
  table.print();
  std::printf("speedup: %s time / fp8 time; bw vs tw, bw vs rw: that fp8 row's time / blockwise's (> 1: blockwise "
              "is faster)\n",
              hp_name);
  if (!block_refused.empty()) {
    std::printf("note: blockwise not run on backend %s, which refuses block scales: %s\n", b.name().c_str(),
                block_refused.c_str());
  }
  for (const std::string& n : notes) std::printf("note: %s\n", n.c_str());
  if (gpu && tw_speedup_8192 > 0) {
    std::printf("target: fp8 GEMM at 8192^3 >= 1.80x bf16: measured %.2fx (%s)\n", tw_speedup_8192,
                tw_speedup_8192 >= 1.8 ? "met" : "missed");
  }
  if (!gpu && cost_2048 > 0) {
    std::printf("target: fp8 GEMM at 2048^3 costs <= 1.20x fp32 sgemm: measured %.2fx (%s)\n", cost_2048,
                cost_2048 <= 1.2 ? "met" : "missed");
    // No target of its own: the line sets block scaling's cost beside the tensorwise target.
    if (bw_cost_2048 > 0) std::printf("blockwise fp8 GEMM at 2048^3 costs %.2fx fp32 sgemm\n", bw_cost_2048);
  }
  return 0;
}

}  // namespace
}  // namespace fp8::bench

int main(int argc, char** argv) {
  fp8::bench::apply_threads_from_environment();
  return fp8::bench::run(argc, argv);
}
