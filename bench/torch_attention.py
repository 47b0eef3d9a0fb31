#!/usr/bin/env python3
"""PyTorch's causal attention at bench_attention's shapes, side by side with ours in one run.

Usage (on a GPU machine with PyTorch):
    bench_attention --device cuda --csv ours_attention.csv
    python3 bench/torch_attention.py --ours ours_attention.csv

Times torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
enable_gqa=True) in bf16, q [B, H, S, D] and k, v [B, KV, S, D] contiguous (its preferred
layout), under each SDPA backend this torch runs (its default dispatch, flash, cuDNN):
the forward alone, and the backward alone (torch.autograd.grad on the retained graph of
one forward). Same method as bench_attention: the median over batches of the mean time
of back-to-back calls, synchronised around each batch. Prints ms, TFLOP/s (bench_attention's
count: 2·B·H·S²·D forward, 2.5x that backward) and ours/PyTorch for each of our kernels
(> 1: ours is faster) against PyTorch's fastest backend.
"""
import argparse
import csv
import sys

import torch
import torch.nn.functional as F

from torch_timing import iterations_for, time_it


def backends():
    """(name, context manager factory) for the SDPA backends to try."""
    out = [("default", None)]
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        out.append(("flash", lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)))
        out.append(("cudnn", lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)))
    except ImportError:
        pass
    return out


def time_backend(ctx, q, k, v, go):
    import contextlib
    with (ctx() if ctx else contextlib.nullcontext()):
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        with torch.no_grad():
            fwd()  # raises where this backend cannot run the shape
            est = time_it(fwd, 1, 1, 1)
            f = time_it(fwd, iterations_for(est, 0.1))
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, enable_gqa=True)
        bwd = lambda: torch.autograd.grad(out, (qg, kg, vg), go, retain_graph=True)
        est = time_it(bwd, 1, 1, 1)
        b = time_it(bwd, iterations_for(est, 0.1))
    return f, b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ours", required=True, help="CSV written by bench_attention --csv")
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.ours)))
    if not rows:
        sys.exit(f"error: {args.ours} holds no rows")
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}; ours from {args.ours}")
    shapes = []
    for r in rows:
        key = tuple(int(r[f]) for f in ("batch", "seq", "n_heads", "n_kv_heads", "head_dim"))
        if key not in shapes:
            shapes.append(key)
    table = [["shape", "torch backend", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s"]]
    ratios = [["shape", "ours", "ours fwd+bwd ms", "torch best fwd+bwd ms", "ours/torch"]]
    for key in shapes:
        B, S, H, KV, D = key
        label = ":".join(map(str, key))
        flops = 2.0 * 2.0 * B * H * S * S * D / 2.0
        g = torch.Generator(device="cuda").manual_seed(1)
        q = (torch.rand(B, H, S, D, device="cuda", generator=g) * 4 - 2).bfloat16()
        k = (torch.rand(B, KV, S, D, device="cuda", generator=g) * 4 - 2).bfloat16()
        v = (torch.rand(B, KV, S, D, device="cuda", generator=g) * 2 - 1).bfloat16()
        go = (torch.rand(B, H, S, D, device="cuda", generator=g) * 2 - 1).bfloat16()
        best = None
        for name, ctx in backends():
            try:
                f, b = time_backend(ctx, q, k, v, go)
            except RuntimeError as e:
                table.append([label, name, "-", "-", "-", f"cannot run: {str(e).splitlines()[0][:60]}"])
                continue
            table.append([label, name, f"{f * 1e3:.3f}", f"{flops / f / 1e12:.1f}", f"{b * 1e3:.3f}",
                          f"{2.5 * flops / b / 1e12:.1f}"])
            if best is None or f + b < best:
                best = f + b
        if best is None:
            continue
        for r in rows:
            if tuple(int(r[f]) for f in ("batch", "seq", "n_heads", "n_kv_heads", "head_dim")) != key:
                continue
            ours = (float(r["forward_ms"]) + float(r["backward_ms"])) / 1e3
            ratios.append([label, r["kernel"], f"{ours * 1e3:.3f}", f"{best * 1e3:.3f}", f"{best / ours:.2f}x"])
        del q, k, v, go
        torch.cuda.empty_cache()
    for t in (table, ratios):
        widths = [max(len(row[i]) for row in t) for i in range(len(t[0]))]
        for i, row in enumerate(t):
            print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
            if i == 0:
                print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        print()
    print("ours/torch: PyTorch's fastest backend's fwd+bwd time / ours (> 1.00x: ours is faster)")


if __name__ == "__main__":
    main()
