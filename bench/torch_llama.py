#!/usr/bin/env python3
"""PyTorch's bf16 training of bench_train's Llama, side by side with ours in one run.

Usage (on a GPU machine with PyTorch):
    bench_train --device cuda --csv ours_train.csv
    python3 bench/torch_llama.py --ours ours_train.csv

The same architecture as the engine's (worker/engine/model/, defaults from
proto/fp8/v1/job.proto), its shape read from our CSV (else examples/jobs/llama-h100.yaml's,
or the flags): byte vocabulary of 256, token embedding, n_layers pre-norm blocks
    h   = x + wo(attention(rope(wq(n)), rope(wk(n)), wv(n)))   n  = rmsnorm(x)
    out = h + w2(silu(w1(n')) * w3(n'))                        n' = rmsnorm(h)
then RMSNorm and an untied output projection; no biases. RMSNorm eps 1e-5 with a gain;
RoPE with theta 10000 rotating the pairs (x[2i], x[2i+1]) by pos * theta^(-2i/head_dim)
(Llama's convention, as the engine); causal grouped-query attention through
torch.nn.functional.scaled_dot_product_attention(is_causal=True) (enable_gqa=True where
this torch runs it on the flash kernel, else keys and values repeated per query group);
mean cross-entropy in fp32. Initialisation as the engine's: N(0, 0.02) for the embedding,
wq, wk, wv, w1, w3 and output, N(0, 0.02 / sqrt(2 n_layers)) for wo and w2, norm gains 1.
AdamW (torch.optim.AdamW, fused=True where available) with the job's defaults: betas
(0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices (not on norm gains); the global grad
norm clipped to 1.0, as the engine's trainer does every step.

Precisions (--precision):
  amp   fp32 master weights, bf16 autocast (the usual mixed precision)
  bf16  everything in bf16 (weights, gradients, optimizer state)
each under torch.compile (the whole model; falls back to eager with a printed note when
compilation fails; --no-compile for eager). Tokens are random bytes made on the GPU up
front: a step's cost does not depend on the data. Gradients are set to None after every
step, and nothing synchronises inside the timed steps (PyTorch's fastest loop; ours reads
the loss and grad norm back every step).

Timing: --warmup steps (compilation happens in the first), then --steps timed steps in
groups of --group, synchronised around each group; the median group's mean step time.
Printed: ms/step, tokens/s, model TFLOP/s and MFU against the H100's dense bf16 peak (989),
peak memory (torch.cuda.max_memory_allocated / _reserved), and, given our CSV, ours/PyTorch
tokens/s ratios (> 1: ours is faster) and issue 8's target (our fp8 faster than PyTorch's
bf16).

--parse-only reads the CSV and prints the configuration, without importing torch.
"""
import argparse
import csv
import gc
import math
import statistics
import sys
import time

BF16_PEAK_TFLOPS = 989.0  # H100/H200 SXM dense bf16 (NVIDIA's datasheets), as bench_train uses

# examples/jobs/llama-h100.yaml with the job.proto defaults it leaves out.
DEFAULTS = dict(dim=2048, n_layers=22, n_heads=32, n_kv_heads=8, ffn_dim=5632, vocab_size=256, seq_len=2048,
                batch_size=4, rope_theta=10000.0, norm_eps=1e-5, tie_embeddings=0)
MODEL_KEYS = tuple(DEFAULTS)


def read_ours(path):
    """bench_train --csv rows, numbers parsed; failed recipes keep an empty tokens_per_s."""
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            r = dict(row)
            for key in ("ms_per_step", "tokens_per_s", "peak_memory_bytes", "flops_per_token"):
                r[key] = float(r[key]) if r.get(key) not in (None, "") else None
            rows.append(r)
    return rows


def model_config(args, ours):
    """The architecture: our CSV's when given (it is what ours trained), else the flags."""
    cfg = {k: getattr(args, k) for k in MODEL_KEYS}
    if ours:
        first = ours[0]
        for k in MODEL_KEYS:
            if first.get(k) not in (None, ""):
                cfg[k] = float(first[k]) if k in ("rope_theta", "norm_eps") else int(float(first[k]))
    if cfg["dim"] % cfg["n_heads"] or cfg["n_heads"] % cfg["n_kv_heads"] or (cfg["dim"] // cfg["n_heads"]) % 2:
        raise SystemExit(f"bad shape: dim {cfg['dim']}, heads {cfg['n_heads']}, kv heads {cfg['n_kv_heads']}")
    if cfg["tie_embeddings"]:
        raise SystemExit("tie_embeddings is not supported here (the llama-h100 job does not tie)")
    return cfg


def parameter_count(cfg):
    d, L, f, v = cfg["dim"], cfg["n_layers"], cfg["ffn_dim"], cfg["vocab_size"]
    hd = d // cfg["n_heads"]
    kv = cfg["n_kv_heads"] * hd
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * f + 2 * d
    return v * d + L * per_layer + d + v * d


def flops_per_token(cfg):
    """bench_train's count: 6 per linear parameter (embedding lookup and norm gains free)
    plus causal attention's two [seq, seq] products, forward and backward."""
    d, L = cfg["dim"], cfg["n_layers"]
    linear = parameter_count(cfg) - cfg["vocab_size"] * d - d * (2 * L + 1)
    return 6.0 * linear + 3.0 * 2.0 * 2.0 * L * cfg["seq_len"] * d / 2.0


def print_table(table):
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for i, row in enumerate(table):
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    sys.stdout.flush()


def report(cfg, results, ours):
    """results: {precision: {ms, tokens_per_s, peak, reserved, compiled, compile_s}}."""
    fpt = flops_per_token(cfg)
    table = [["torch", "compiled", "ms/step", "tokens/s", "model TFLOP/s", "% bf16 peak", "peak mem GB",
              "reserved GB", "first step s", "loss"]]
    for name, r in results.items():
        tflops = r["tokens_per_s"] * fpt / 1e12
        table.append([name, "yes" if r["compiled"] else "no", f"{r['ms']:.1f}", f"{r['tokens_per_s']:.0f}",
                      f"{tflops:.1f}", f"{100 * tflops / BF16_PEAK_TFLOPS:.1f}", f"{r['peak'] / 1e9:.2f}",
                      f"{r['reserved'] / 1e9:.2f}", f"{r['compile_s']:.1f}", f"{r['loss']:.3f}"])
    print_table(table)
    ok = [r for r in ours if r.get("tokens_per_s")]
    if not ok:
        return
    names = list(results)
    table = [["ours", "ours ms/step", "ours tokens/s", "ours peak GB"] + [f"ours/torch {n}" for n in names]]
    for r in ok:
        peak = r.get("peak_memory_bytes")
        table.append([r["recipe"], f"{r['ms_per_step']:.1f}", f"{r['tokens_per_s']:.0f}",
                      f"{peak / 1e9:.2f}" if peak else "-"]
                     + [f"{r['tokens_per_s'] / results[n]['tokens_per_s']:.2f}x" for n in names])
    print_table(table)
    print("ours/torch: tokens/s ratio (> 1.00x: ours is faster). Ours 'none' is the engine's high-precision "
          "baseline in the job's train.compute_dtype (llama-h100: bf16 activations and GEMMs, fp32 master weights). "
          "Losses do not compare: PyTorch trains on random bytes, ours on text")
    best = max(results.values(), key=lambda r: r["tokens_per_s"])
    best_name = [n for n, r in results.items() if r is best][0]
    parts = []
    for r in ok:
        if r["recipe"] == "none":
            continue
        x = r["tokens_per_s"] / best["tokens_per_s"]
        parts.append(f"{r['recipe']} {x:.2f}x ({'met' if x > 1 else 'missed'})")
    if parts:
        print(f"target: our fp8 faster than PyTorch bf16 (its fastest here: {best_name}): " + ", ".join(parts))


# ---- PyTorch -----------------------------------------------------------------------------


def build_model(torch, cfg):
    nn, F = torch.nn, torch.nn.functional
    d, L, V = cfg["dim"], cfg["n_layers"], cfg["vocab_size"]
    nh, nkv = cfg["n_heads"], cfg["n_kv_heads"]
    hd = d // nh
    eps = cfg["norm_eps"]

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            if hasattr(F, "rms_norm"):
                return F.rms_norm(x, (d,), self.weight, eps)
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * self.weight

    def rope(x, cos, sin):
        # x [b, s, h, hd]; rotates the pairs (x[2i], x[2i+1]).
        xf = x.float().unflatten(-1, (hd // 2, 2))
        x0, x1 = xf[..., 0], xf[..., 1]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).type_as(x)

    class Block(nn.Module):
        def __init__(self, gqa_native):
            super().__init__()
            self.attention_norm, self.ffn_norm = RMSNorm(), RMSNorm()
            self.wq = nn.Linear(d, nh * hd, bias=False)
            self.wk = nn.Linear(d, nkv * hd, bias=False)
            self.wv = nn.Linear(d, nkv * hd, bias=False)
            self.wo = nn.Linear(nh * hd, d, bias=False)
            self.w1 = nn.Linear(d, cfg["ffn_dim"], bias=False)
            self.w3 = nn.Linear(d, cfg["ffn_dim"], bias=False)
            self.w2 = nn.Linear(cfg["ffn_dim"], d, bias=False)
            self.gqa_native = gqa_native

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            n = self.attention_norm(x)
            q = rope(self.wq(n).view(b, s, nh, hd), cos, sin).transpose(1, 2)
            k = rope(self.wk(n).view(b, s, nkv, hd), cos, sin).transpose(1, 2)
            v = self.wv(n).view(b, s, nkv, hd).transpose(1, 2)
            if nkv != nh and self.gqa_native:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            else:
                if nkv != nh:  # query head h reads kv head h // (nh / nkv), as the engine
                    k = k.repeat_interleave(nh // nkv, dim=1)
                    v = v.repeat_interleave(nh // nkv, dim=1)
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            h = x + self.wo(o.transpose(1, 2).reshape(b, s, nh * hd))
            n = self.ffn_norm(h)
            return h + self.w2(F.silu(self.w1(n)) * self.w3(n))

    class Llama(nn.Module):
        def __init__(self, gqa_native):
            super().__init__()
            self.tok_embeddings = nn.Embedding(V, d)
            self.layers = nn.ModuleList(Block(gqa_native) for _ in range(L))
            self.norm = RMSNorm()
            self.output = nn.Linear(d, V, bias=False)
            # RoPE tables in fp64 then fp32, as the engine computes its own.
            inv = cfg["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
            ang = torch.arange(cfg["seq_len"], dtype=torch.float64)[:, None] * inv[None, :]
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)
            std, scaled = 0.02, 0.02 / math.sqrt(2 * L)
            for name, p in self.named_parameters():
                if name.endswith(("wo.weight", "w2.weight")):
                    nn.init.normal_(p, 0.0, scaled)
                elif p.dim() == 2:
                    nn.init.normal_(p, 0.0, std)

        def forward(self, tokens, targets):
            x = self.tok_embeddings(tokens)
            for layer in self.layers:
                x = layer(x, self.cos, self.sin)
            logits = self.output(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, V), targets.reshape(-1))

    return Llama


def gqa_native_ok(torch):
    """Whether sdpa(enable_gqa=True) runs on the flash kernel here (else keys/values are repeated)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q = torch.randn(1, 4, 128, 64, device="cuda", dtype=torch.bfloat16)
        kv = torch.randn(1, 2, 128, 64, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001 - an older torch or a kernel without GQA: repeat instead
        return False


def make_optimizer(torch, model):
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True), "fused"
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8), "foreach"


def run_precision(torch, cfg, precision, args, gqa_native):
    torch.manual_seed(0)
    Llama = build_model(torch, cfg)
    with torch.device("cuda"):  # initialised on the GPU: 1.1B normal draws on a CPU take long
        model = Llama(gqa_native)
    if precision == "bf16":
        model = model.to(torch.bfloat16)
        model.cos, model.sin = model.cos.float(), model.sin.float()  # the RoPE tables stay fp32
    opt, opt_kind = make_optimizer(torch, model)
    B, S, V = cfg["batch_size"], cfg["seq_len"], cfg["vocab_size"]
    g = torch.Generator(device="cuda").manual_seed(0)
    data = [torch.randint(0, V, (B, S + 1), device="cuda", generator=g) for _ in range(4)]
    params = list(model.parameters())
    fn = model
    compiled = False
    if not args.no_compile:
        fn = torch.compile(model)
        compiled = True

    def step(i, fwd):
        batch = data[i % len(data)]
        tokens, targets = batch[:, :-1], batch[:, 1:]
        if precision == "amp":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(tokens, targets)
        else:
            loss = fwd(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    try:
        loss = step(0, fn)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - any compiler failure: go on eager
        if not compiled:
            raise
        print(f"note: torch.compile failed ({type(e).__name__}: {str(e)[:300]}); {precision} runs eager", flush=True)
        opt.zero_grad(set_to_none=True)
        fn, compiled = model, False
        loss = step(0, fn)
        torch.cuda.synchronize()
    first_step_s = time.perf_counter() - t0
    for i in range(1, args.warmup):
        loss = step(i, fn)
    torch.cuda.synchronize()

    samples = []
    i = args.warmup
    for _ in range(max(1, args.steps // args.group)):
        t0 = time.perf_counter()
        for _ in range(args.group):
            loss = step(i, fn)
            i += 1
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / args.group)
    ms = statistics.median(samples) * 1e3
    result = dict(ms=ms, tokens_per_s=B * S / (ms / 1e3), peak=torch.cuda.max_memory_allocated(),
                  reserved=torch.cuda.max_memory_reserved(), compiled=compiled, compile_s=first_step_s,
                  loss=float(loss.item()), optimizer=opt_kind)
    del model, opt, fn, data, params
    gc.collect()
    torch.cuda.empty_cache()
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ours", help="CSV written by bench_train --device cuda --csv (its model shape is used)")
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=type(v), default=v,
                        help=f"without --ours (default {v})")
    ap.add_argument("--precision", type=lambda s: s.split(","), default=["amp", "bf16"],
                    help="amp (fp32 weights, bf16 autocast) and/or bf16 (pure bf16); default amp,bf16")
    ap.add_argument("--warmup", type=int, default=4, help="untimed steps first (compilation is in the first)")
    ap.add_argument("--steps", type=int, default=15, help="timed steps")
    ap.add_argument("--group", type=int, default=5, help="timed steps between synchronisations")
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds: a precision is skipped when the last one's time would overrun this (0: no limit)")
    ap.add_argument("--parse-only", action="store_true", help="print the configuration and exit (no torch needed)")
    args = ap.parse_args(argv)
    for p in args.precision:
        if p not in ("amp", "bf16"):
            ap.error(f"--precision: '{p}' is neither amp nor bf16")
    if args.warmup < 1 or args.steps < 1 or args.group < 1:
        ap.error("--warmup, --steps and --group must be positive")
    ours = read_ours(args.ours) if args.ours else []
    cfg = model_config(args, ours)
    describe = ", ".join(f"{k} {cfg[k]}" for k in MODEL_KEYS)
    if args.parse_only:
        print(f"model: {describe}; {parameter_count(cfg) / 1e9:.3f}B parameters; "
              f"{flops_per_token(cfg) / 1e9:.3f} GFLOP per token")
        for r in ours:
            print(f"ours {r['recipe']}: {r['tokens_per_s'] or 'failed'} tokens/s")
        return 0

    import torch  # only here: --parse-only and the helpers above run without it

    gqa_native = gqa_native_ok(torch)
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}; ours from {args.ours or '-'}")
    print(f"# model: {describe}; {parameter_count(cfg) / 1e9:.3f}B parameters; "
          f"{cfg['batch_size'] * cfg['seq_len']} tokens per step; GQA: "
          f"{'sdpa enable_gqa' if gqa_native else 'keys/values repeated per group'}")
    print(f"# {args.warmup} warm-up steps, then {args.steps} timed in groups of {args.group} (median group)")
    results = {}
    start, last_s = time.perf_counter(), 0.0
    for p in args.precision:
        t0 = time.perf_counter()
        if args.budget and results and t0 - start + last_s > args.budget:
            print(f"note: {p} skipped: the previous precision took {last_s:.0f} s and {args.budget - (t0 - start):.0f} s "
                  f"of --budget remain", flush=True)
            continue
        try:
            results[p] = run_precision(torch, cfg, p, args, gqa_native)
        except torch.cuda.OutOfMemoryError as e:
            print(f"note: {p} ran out of GPU memory: {str(e)[:200]}", flush=True)
            gc.collect()
            torch.cuda.empty_cache()
            continue
        r = results[p]
        last_s = time.perf_counter() - t0
        print(f"# {p}: {r['ms']:.1f} ms/step, {r['tokens_per_s']:.0f} tokens/s ({r['optimizer']} AdamW, "
              f"{'compiled' if r['compiled'] else 'eager'}; {time.perf_counter() - t0:.0f} s in all)", flush=True)
    if not results:
        print("no PyTorch run finished")
        return 1
    report(cfg, results, ours)
    return 0


if __name__ == "__main__":
    sys.exit(main())
