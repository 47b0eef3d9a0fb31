#!/usr/bin/env python3
"""Loss curves of training runs, one log per recipe (fp8-train's text or JSON log with
train.log_every 1), side by side: each recipe's mean loss over the last 10% of steps against
the first log's (recipe none), and the curves as one CSV (step, then a column per recipe).

    bench/loss_parity.py [--out DIR] [--goal 0.015] LOG_none LOG_tensorwise ...

A log's recipe is its file name without the extension. Exit status 1 when a log has no
step lines or the runs' steps differ; the goal's verdict is printed, not an exit status.
"""
import argparse
import math
import os
import re
import sys

STEP = re.compile(r"step\s+(\d+)/(\d+)\s+loss\s+(\S+)")


def read_curve(path):
    curve = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = STEP.search(line)
            if m:
                curve[int(m.group(1))] = float(m.group(3))
    return curve


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for loss_curves.csv")
    ap.add_argument("--goal", type=float, default=0.015, help="allowed relative excess over the baseline")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()

    names = [os.path.splitext(os.path.basename(p))[0] for p in args.logs]
    curves = [read_curve(p) for p in args.logs]
    for name, path, curve in zip(names, args.logs, curves):
        if not curve:
            print(f"loss_parity.py: {path}: no 'step N/M loss X' lines", file=sys.stderr)
            return 1
    steps = sorted(curves[0])
    for name, curve in zip(names, curves):
        if sorted(curve) != steps:
            print(f"loss_parity.py: {name} logged other steps than {names[0]}", file=sys.stderr)
            return 1

    tail = steps[-max(1, len(steps) // 10):]
    base = sum(curves[0][s] for s in tail) / len(tail)
    print(f"{len(steps)} steps; mean loss over the last {len(tail)} (steps {tail[0]}..{tail[-1]}), "
          f"against {names[0]}'s; goal: within {args.goal:.1%}\n")
    print(f"| recipe | first loss | mean loss, last 10% | vs {names[0]} | within {args.goal:.1%} |")
    print("|---|---|---|---|---|")
    for name, curve in zip(names, curves):
        mean = sum(curve[s] for s in tail) / len(tail)
        ratio = mean / base if base else math.nan
        ok = math.isfinite(mean) and ratio - 1.0 <= args.goal
        print(f"| {name} | {curve[steps[0]]:.4f} | {mean:.4f} | {ratio:.4f} ({ratio - 1.0:+.2%}) | "
              f"{'yes' if ok else 'NO'} |")

    if args.out:
        with open(os.path.join(args.out, "loss_curves.csv"), "w", encoding="utf-8") as f:
            f.write(",".join(["step"] + names) + "\n")
            for s in steps:
                f.write(",".join([str(s)] + [repr(c[s]) for c in curves]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
