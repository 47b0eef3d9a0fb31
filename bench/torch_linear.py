#!/usr/bin/env python3
"""PyTorch's bf16 linear at bench_linear's shapes, side by side with ours in one run.

Usage (on a GPU machine with PyTorch):
    bench_linear --device cuda --csv ours_linear.csv
    python3 bench/torch_linear.py --ours ours_linear.csv

For every shape and mode in our CSV (tokens M, in_features K, out_features N):
  step    torchao's ln -> linear -> sigmoid: x [M, K] bf16 (requires grad), RMSNorm with a
          weight (torch.nn.functional.rms_norm, or the same formula written out on older
          torch), nn.Linear(K, N, bias=False) in bf16, sigmoid, y.sum().backward()
  linear  nn.Linear(K, N, bias=False) in bf16 alone: y = linear(x); y.backward(g) with a
          fixed upstream gradient g
each eager and under torch.compile (compiled rows fall back to eager, with a printed note,
when compilation fails). Gradients are set to None after each step, so PyTorch never pays
for accumulating them (its fastest setting; ours accumulates grad_weight in the GEMM).

Timing as bench_linear and torch_gemm.py: one untimed step sizes batches of ~50 ms of
back-to-back steps, synchronised around each batch; the median batch mean over 7 batches.
Printed: PyTorch's times, ours from the CSV, ours/PyTorch speed ratios (> 1: ours is
faster), and issue 8's target: our fp8 step at M=16384, K=N=8192 against PyTorch's bf16.

Our activations are those of the CSV's `activations` column (bench_linear --activations;
bf16 by default on a GPU; a CSV without the column is from before it and had fp32). With
bf16 both sides move bf16 activations and gradients; ours keeps an fp32 master weight (recipe
none converts it to bf16 each forward, as autocast, where PyTorch's bf16 nn.Linear reads
its bf16 weight as is) and accumulates an fp32 grad_weight. With fp32 our elementwise work
(RMSNorm, sigmoid, casts) moves twice PyTorch's bytes. Ours leaves out the loss's sum()
(one read of the output).

--parse-only reads the CSV and prints what would run, without importing torch.
"""
import argparse
import csv
import math
import sys
import time

from torch_timing import iterations_for, time_it

FP8_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp", "delayed")
TARGET_SHAPE = (16384, 8192, 8192)
TARGET_RATIO = 1.4


def shape_label(m, k, n):
    return f"{m}^3" if m == k == n else f"{m}x{k}x{n}"


def parse_shape(text):
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) == 1:
        parts = parts * 3
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"'{text}' is not D or MxKxN")
    return tuple(parts)


def read_ours(path):
    """bench_linear --csv: mode,activations,m,k,n,contender,ms,err_out,err_grad_input.

    The older format without `activations` (fp32 activations, the only kind then) is read
    too. Returns ({(mode, (m, k, n)): {contender: ms}} in file order, the activation dtypes
    seen in file order); where rows of several activation dtypes share a mode and shape,
    each contender is named with its dtype ("none (bf16)").
    """
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            act = (row.get("activations") or "fp32").strip()
            key = (row["mode"], (int(row["m"]), int(row["k"]), int(row["n"])))
            rows.append((key, act, row["contender"], float(row["ms"])))
    acts = list(dict.fromkeys(act for _, act, _, _ in rows))
    ours = {}
    for key, act, name, ms in rows:
        ours.setdefault(key, {})[name if len(acts) == 1 else f"{name} ({act})"] = ms
    return ours, acts


def ours_legend(acts):
    """What our rows are, for the footnote: it depends on the activation dtype of the run."""
    parts = []
    if "bf16" in acts:
        parts.append("bf16 activations: none is the bf16 linear (bf16 GEMMs from the fp32 weight converted each "
                     "forward), the fp8 recipes take and give bf16")
    if "fp32" in acts:
        parts.append("fp32 activations: none runs fp32 GEMMs, bf16 converts x, W and the gradient to bf16 each step "
                     "(autocast in an fp32 model), the fp8 recipes take and give fp32")
    parts.append("bf16_gemms: the bare bf16 GEMMs; the rest: Float8Linear")
    return "; ".join(parts)


def plan(args):
    """The (mode, shape) pairs to time, and ours keyed alike (empty without --ours)."""
    ours, acts = read_ours(args.ours) if args.ours else ({}, [])
    if ours:
        pairs = list(ours.keys())
    else:
        shapes = args.shapes or [(4096,) * 3, (8192,) * 3, (16384,) * 3, TARGET_SHAPE]
        pairs = [(mode, s) for s in shapes for mode in args.modes]
    pairs = [(mode, s) for mode, s in pairs if mode in args.modes and (not args.max_size or max(s) <= args.max_size)]
    return pairs, ours, acts


def ratio(torch_ms, ours_ms):
    """Speed ratio ours/PyTorch as a string: > 1 means ours is faster."""
    if not ours_ms or not torch_ms or math.isnan(ours_ms) or math.isnan(torch_ms):
        return "-"
    return f"{torch_ms / ours_ms:.2f}x"


def print_table(table):
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    sys.stdout.flush()


def report(results, ours, acts):
    """results: {(mode, shape): {"eager": ms, "compiled": ms}}. Prints the tables and targets."""
    header = ["mode", "shape", "torch eager ms", "torch compiled ms", "ours", "ours ms", "ours/torch compiled",
              "ours/torch eager"]
    table = [header]
    for (mode, shape), t in results.items():
        mine = ours.get((mode, shape), {})
        label = shape_label(*shape)
        if not mine:
            table.append([mode, label, f"{t['eager']:.3f}", f"{t['compiled']:.3f}", "-", "-", "-", "-"])
        for name, ms in mine.items():
            table.append([mode, label, f"{t['eager']:.3f}", f"{t['compiled']:.3f}", name, f"{ms:.3f}",
                          ratio(t["compiled"], ms), ratio(t["eager"], ms)])
    print_table(table)
    print("ours/torch X: PyTorch's time / ours (> 1.00x: ours is faster). PyTorch: bf16 activations and weights; "
          f"ours: {ours_legend(acts)}")
    for mode in ("step", "linear"):
        t = results.get((mode, TARGET_SHAPE))
        mine = ours.get((mode, TARGET_SHAPE), {})
        if not t or not mine:
            continue
        parts = []
        for name in FP8_RECIPES:
            for act in acts:
                key = name if len(acts) == 1 else f"{name} ({act})"
                if key in mine:
                    r = t["compiled"] / mine[key]
                    parts.append(f"{key} {r:.2f}x ({'met' if r >= TARGET_RATIO else 'missed'})")
        print(f"target: our fp8 {mode} at {shape_label(*TARGET_SHAPE)} ({'/'.join(acts)} activations) >= "
              f"{TARGET_RATIO:.2f}x PyTorch's compiled bf16: " + ", ".join(parts))


# ---- PyTorch -----------------------------------------------------------------------------


def rms_norm_fn(torch):
    F = torch.nn.functional
    if hasattr(F, "rms_norm"):
        return lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps)

    def manual(x, w, eps):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    return manual


def make_steps(torch, mode, shape):
    """(eager step, step to compile-wrap) for one mode and shape; tensors live in the closure."""
    m, k, n = shape
    dev, bf16 = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(m, k, device=dev, dtype=bf16, generator=g).requires_grad_(True)
    lin = torch.nn.Linear(k, n, bias=False, device=dev, dtype=bf16)
    rms = rms_norm_fn(torch)
    norm_w = torch.ones(k, device=dev, dtype=bf16, requires_grad=True)
    upstream = torch.randn(m, n, device=dev, dtype=bf16, generator=g)
    params = [x, norm_w, lin.weight]

    if mode == "step":
        def forward(inp):
            return torch.sigmoid(lin(rms(inp, norm_w, 1e-5)))
    else:
        def forward(inp):
            return lin(inp)

    def runner(fwd):
        def step():
            y = fwd(x)
            if mode == "step":
                y.sum().backward()
            else:
                y.backward(upstream)
            for p in params:
                p.grad = None
        return step

    return runner, forward


def time_torch(torch, pairs, reps, compile_ok, budget_s=0):
    results = {}
    start = time.perf_counter()
    for mode, shape in pairs:
        if budget_s and time.perf_counter() - start > budget_s:
            print(f"note: {mode} {shape_label(*shape)} skipped: --budget of {budget_s:.0f} s spent", flush=True)
            continue
        runner, forward = make_steps(torch, mode, shape)
        eager = runner(forward)
        times = {}
        fns = {"eager": eager}
        if compile_ok:
            try:
                # Static shapes: one specialised graph per shape, as a model would get
                # (the same function at a new shape would otherwise turn dynamic).
                compiled = runner(torch.compile(forward, dynamic=False))
                for _ in range(3):  # compile, then let autotuning caches settle
                    compiled()
                torch.cuda.synchronize()
                fns["compiled"] = compiled
            except Exception as e:  # noqa: BLE001 - any compiler failure means: time eager instead
                print(f"note: torch.compile failed for {mode} {shape_label(*shape)} ({type(e).__name__}: {e}); "
                      f"the compiled column repeats eager")
        for name, fn in fns.items():
            est = time_it(fn, 1, 1, warmup=2)
            times[name] = time_it(fn, iterations_for(est, 0.05), reps, warmup=0) * 1e3
        times.setdefault("compiled", times["eager"])
        results[(mode, shape)] = times
        print(f"# {mode} {shape_label(*shape)}: eager {times['eager']:.3f} ms, compiled {times['compiled']:.3f} ms",
              flush=True)
        del runner, forward, eager, fns
        torch.cuda.empty_cache()
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", help="CSV written by bench_linear --csv (its shapes and modes are timed)")
    ap.add_argument("--shapes", type=parse_shape, nargs="*", help="without --ours: D or MxKxN (default: ours')")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=["step", "linear"], help="step,linear")
    ap.add_argument("--max-size", type=int, default=0, help="skip shapes with a dimension above this")
    ap.add_argument("--reps", type=int, default=7, help="timed batches per variant (the median is kept)")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: the shapes not started by then are skipped (0: no limit)")
    ap.add_argument("--parse-only", action="store_true", help="print the plan and exit (no torch needed)")
    args = ap.parse_args(argv)
    for m in args.modes:
        if m not in ("step", "linear"):
            ap.error(f"--modes: '{m}' is neither step nor linear")
    pairs, ours, acts = plan(args)
    if args.parse_only:
        if args.ours:
            print(f"ours: {'/'.join(acts) or '-'} activations")
        for mode, shape in pairs:
            mine = ", ".join(f"{k} {v:.3f} ms" for k, v in ours.get((mode, shape), {}).items())
            print(f"{mode} {shape_label(*shape)}: ours {mine or '-'}")
        return 0

    import torch  # only here: --parse-only and the helpers above run without it

    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}; ours from {args.ours or '-'}"
          f"{' (' + '/'.join(acts) + ' activations)' if acts else ''}")
    print("# ms per step, bf16; step: rms_norm -> linear -> sigmoid, sum().backward(); linear: linear alone, "
          "backward from a fixed gradient; grads set to None after each step")
    results = time_torch(torch, pairs, args.reps, not args.no_compile, args.budget)
    report(results, ours, acts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
