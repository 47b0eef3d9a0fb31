"""How the PyTorch peers (torch_gemm.py, torch_linear.py, torch_attention.py) time a callable,
the same way our benchmarks do: the median over `reps` batches of the mean time of `iters`
back-to-back calls, with the device synchronised around each batch.

Imported from the peers' own directory (python3 bench/torch_*.py puts it on sys.path).
"""
import statistics
import time


def time_it(fn, iters, reps=7, warmup=2):
    import torch  # here, so that importing this module needs no torch (torch_linear.py --parse-only)

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / iters)
    return statistics.median(samples)


def iterations_for(estimate_s, target_s):
    """Calls per batch so that a batch lasts about target_s, given one call's estimate."""
    return max(1, min(1000, int(target_s / estimate_s))) if estimate_s > 0 else 10
