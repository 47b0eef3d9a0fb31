// bench_cast: the fp8 casts against a plain copy of the same buffers, side by side in
// one run. Casts are memory bound, so the figure of merit is effective bandwidth (bytes
// read + bytes written, per second) as a fraction of the copy's.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"

namespace fp8::bench {
namespace {

constexpr const char* kUsage =
    "usage: bench_cast [--device cpu|cuda] [--quick]\n"
    "  Times amax, cast, fused amax+cast, cast+transpose and dynamic quantization of a\n"
    "  large matrix, and prints each one's bandwidth as a fraction of a plain copy.";

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv, kUsage);
  Backend& b = open_backend(o);
  const bool gpu = b.is_cuda();
  const int64_t rows = gpu ? 16384 : (o.quick ? 2048 : 4096);
  const int64_t cols = gpu ? 8192 : (o.quick ? 2048 : 4096);
  const int64_t n = rows * cols;
  std::printf("# bench_cast %s on %s (backend %s), matrix %lld x %lld\n", today().c_str(),
              machine_peaks(b).machine.c_str(), b.name().c_str(), static_cast<long long>(rows),
              static_cast<long long>(cols));

  DeviceBuffer x32(b, static_cast<size_t>(n) * 4), x16(b, static_cast<size_t>(n) * 2);
  fill_gaussian(x32, n, 3);
  check(b.convert(x32.as<void>(), DType::kFloat32, x16.as<void>(), DType::kBFloat16, n), "convert");
  DeviceBuffer copy_dst(b, static_cast<size_t>(n) * 4);
  DeviceBuffer out(b, static_cast<size_t>(n)), out_t(b, static_cast<size_t>(n));
  DeviceBuffer scale(b, static_cast<size_t>(std::max(rows, cols)) * 4), amax(b, static_cast<size_t>(std::max(rows, cols)) * 4);
  DeviceBuffer col_scale(b, static_cast<size_t>(cols) * 4);
  {
    std::vector<float> ones(static_cast<size_t>(std::max(rows, cols)), 1.0f);
    scale.upload(ones.data(), ones.size() * 4);
  }

  Table table({"input", "op", "ms", "GB/s", "of copy"});
  double worst_fused = 1e9;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const void* in = t == DType::kFloat32 ? x32.as<void>() : x16.as<void>();
    const double in_bytes = static_cast<double>(n) * static_cast<double>(dtype_size(t));
    const double fp8_bytes = static_cast<double>(n);
    const MatrixRef x{in, t, rows, cols};

    auto cast_args = [&](bool to_out, bool to_out_t, bool with_amax) {
      CastArgs c;
      c.input = x;
      c.scale = scale.as<float>();
      c.out = to_out ? out.as<uint8_t>() : nullptr;
      c.out_t = to_out_t ? out_t.as<uint8_t>() : nullptr;
      c.amax_out = with_amax ? amax.as<float>() : nullptr;
      return c;
    };
    auto quantize_args = [&](Granularity g) {
      QuantizeArgs q;
      q.input = x;
      q.granularity = g;
      q.out = out.as<uint8_t>();
      q.scale_out = scale.as<float>();
      return q;
    };
    struct Op {
      std::string name;
      double bytes;
      std::function<void()> fn;
      bool fused_cast;  // counts toward the fused amax+cast target
    };
    const CastArgs cast_only = cast_args(true, false, false), fused = cast_args(true, false, true);
    const CastArgs transposed = cast_args(false, true, false), both = cast_args(true, true, true);
    const QuantizeArgs q_tw = quantize_args(Granularity::kTensorwise), q_rw = quantize_args(Granularity::kRowwise);
    // The rowwise recipe's two casts of one tensor: by rows to out, by columns to out_t.
    QuantizeArgs q_cw = quantize_args(Granularity::kColumnwise);
    q_cw.out = nullptr;
    q_cw.out_t = out_t.as<uint8_t>();
    q_cw.scale_out = col_scale.as<float>();
    QuantizeArgs q_both = q_rw;
    q_both.columnwise.out_t = q_cw.out_t;
    q_both.columnwise.scale_out = q_cw.scale_out;
    const std::function<void()> cast_transposed = [&] { check(b.cast(transposed), "cast"); };
    const std::function<void()> cast_both = [&] { check(b.cast(both), "cast"); };
    std::vector<Op> ops = {
        {"copy (baseline)", 2 * in_bytes, [&] { check(b.convert(in, t, copy_dst.as<void>(), t, n), "copy"); }, false},
        {"amax", in_bytes, [&] { check(b.amax(x, Granularity::kTensorwise, amax.as<float>()), "amax"); }, false},
        {"cast", in_bytes + fp8_bytes, [&] { check(b.cast(cast_only), "cast"); }, false},
        {"fused amax+cast", in_bytes + fp8_bytes, [&] { check(b.cast(fused), "cast"); }, true},
        {"cast+transpose", in_bytes + fp8_bytes, cast_transposed, false},
        {"fused amax+cast+transpose (both outputs)", in_bytes + 2 * fp8_bytes, cast_both, false},
        {"quantize tensorwise (amax pass + cast pass)", in_bytes + fp8_bytes, [&] { check(b.quantize(q_tw), "quantize"); }, false},
        {"quantize rowwise", in_bytes + fp8_bytes, [&] { check(b.quantize(q_rw), "quantize"); }, false},
        // Bytes as if each read the input once, so that "of copy" compares their times.
        {"quantize rowwise, then columnwise+transpose", in_bytes + 2 * fp8_bytes,
         [&] {
           check(b.quantize(q_rw), "quantize");
           check(b.quantize(q_cw), "quantize");
         },
         false},
        {"quantize rowwise and columnwise+transpose together", in_bytes + 2 * fp8_bytes,
         [&] { check(b.quantize(q_both), "quantize"); }, false},
    };
    if (gpu && t == DType::kBFloat16) {
      // Backend::transpose_bytes on fp8 codes (a FSDP rank's gathered weights).
      const std::function<void()> transpose_codes = [&] {
        check(b.transpose_bytes(out.as<uint8_t>(), rows, cols, out_t.as<uint8_t>()), "transpose_bytes");
      };
      ops.push_back({"fp8 codes transpose (input: fp8)", 2 * fp8_bytes, transpose_codes, false});
    }
    // All ops of one input dtype are timed interleaved, so machine noise hits them alike.
    std::vector<std::function<void()>> fns;
    for (const auto& op : ops) fns.push_back(op.fn);
    const int iters = iterations_for(time_it(b, ops[0].fn, 1, 1, 1));
    const std::vector<double> seconds = time_interleaved(b, fns, iters);
    const double copy_bw = ops[0].bytes / seconds[0] / 1e9;
    for (size_t i = 0; i < ops.size(); ++i) {
      const double bw = ops[i].bytes / seconds[i] / 1e9;
      if (ops[i].fused_cast) worst_fused = std::min(worst_fused, bw / copy_bw);
      table.add({dtype_name(t), ops[i].name, fmt(seconds[i] * 1e3, 3), fmt(bw, 1), fmt(100 * bw / copy_bw, 0) + "%"});
    }
  }
  table.print();
  const double target = gpu ? 0.8 : 0.6;
  std::printf("target: fused amax+cast >= %.0f%% of copy bandwidth: measured %.0f%% (worst input dtype) (%s)\n",
              100 * target, 100 * worst_fused, worst_fused >= target ? "met" : "missed");
  return 0;
}

}  // namespace
}  // namespace fp8::bench

int main(int argc, char** argv) {
  fp8::bench::apply_threads_from_environment();
  return fp8::bench::run(argc, argv);
}
