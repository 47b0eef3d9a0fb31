#!/usr/bin/env python3
"""PyTorch's GEMMs at bench_gemm's shapes, side by side with ours in one run.

Usage (on a GPU machine with PyTorch):
    bench_gemm --device cuda --csv ours.csv
    python3 bench/torch_gemm.py --ours ours.csv

Times torch.matmul in bf16 and torch._scaled_mm in fp8 (e4m3, tensorwise with fast
accumulation, and rowwise) on the same shapes, with the same method as bench_gemm
(median over batches of the mean time of back-to-back calls, synchronised around each
batch), and prints ours / PyTorch for each.
"""
import argparse
import csv

import torch

from torch_timing import iterations_for, time_it


def quantize_tensorwise(x):
    scale = 448.0 / x.abs().amax().float().clamp_min(1e-12)
    return (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn), (1.0 / scale).reshape(1, 1)


def quantize_rowwise(x):
    scale = 448.0 / x.abs().amax(dim=1, keepdim=True).float().clamp_min(1e-12)
    return (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn), (1.0 / scale)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="CSV written by bench_gemm --csv")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.ours)))
    dev = torch.cuda.get_device_name()
    print(f"# torch {torch.__version__} on {dev}; ours from {args.ours}")
    header = ["shape", "torch bf16 ms", "ours bf16 ms", "ours/torch bf16", "torch fp8 tw ms", "ours fp8 tw ms",
              "ours/torch fp8 tw", "torch fp8 rw ms", "ours fp8 rw ms", "ours/torch fp8 rw", "torch fp8tw/bf16"]
    table = [header]
    for r in rows:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(m, k, device="cuda", generator=g)
        w = torch.randn(n, k, device="cuda", generator=g)
        xb, wb = x.bfloat16(), w.bfloat16()
        xt, sxt = quantize_tensorwise(x)
        wt, swt = quantize_tensorwise(w)
        xr, sxr = quantize_rowwise(x)
        wr, swr = quantize_rowwise(w)
        del x, w
        bf16 = lambda: torch.matmul(xb, wb.t())
        tw = lambda: torch._scaled_mm(xt, wt.t(), scale_a=sxt, scale_b=swt, out_dtype=torch.bfloat16,
                                      use_fast_accum=True)
        swr_t = swr.reshape(1, n).contiguous()
        try:
            rw = lambda: torch._scaled_mm(xr, wr.t(), scale_a=sxr, scale_b=swr_t, out_dtype=torch.bfloat16,
                                          use_fast_accum=True)
            rw()
        except RuntimeError:
            rw = lambda: torch._scaled_mm(xr, wr.t(), scale_a=sxr, scale_b=swr_t, out_dtype=torch.bfloat16)
        iters = iterations_for(time_it(bf16, 1, 1, 1), 0.2)
        t_bf16, t_tw, t_rw = (time_it(f, iters, reps=5) * 1e3 for f in (bf16, tw, rw))
        ours_hp, ours_tw, ours_rw = float(r["hp_ms"]), float(r["fp8_tensorwise_ms"]), float(r["fp8_rowwise_ms"])
        # ours/torch is a speed ratio: > 1 means ours is faster.
        table.append([r["shape"], f"{t_bf16:.3f}", f"{ours_hp:.3f}", f"{t_bf16 / ours_hp:.2f}x", f"{t_tw:.3f}",
                      f"{ours_tw:.3f}", f"{t_tw / ours_tw:.2f}x", f"{t_rw:.3f}", f"{ours_rw:.3f}",
                      f"{t_rw / ours_rw:.2f}x", f"{t_bf16 / t_tw:.2f}x"])
        del xb, wb, xt, wt, xr, wr
        torch.cuda.empty_cache()
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.rjust(wd) for c, wd in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (wd + 2) for wd in widths) + "|")
    print("speed ratios: > 1.00x means ours is faster than PyTorch at that shape")


if __name__ == "__main__":
    main()
