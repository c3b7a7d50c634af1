#!/usr/bin/env python3
"""PyTorch reference for the `bench` binary: eager launches vs CUDA-graph replay of a chain of K
tiny dependent ops per step, in the same units as `bench` (µs per step, median and p10/p90).

    python3 examples/python/torch_graph.py [--reps N] [--quick] [--json PATH]

Each step is K x `x.add_(1)` on a 32-element int32 tensor (one tiny kernel each, every one
depending on the one before through `x`), the PyTorch twin of `bench`'s chain of `add` kernels.
µs per step = wall time of N steps issued back-to-back, then one torch.cuda.synchronize(),
divided by N; the median and p10/p90 are over `--reps` repetitions (default 200; 20 with
`--quick`, which also stops at K = 100). Rows:
  eager   K x x.add_(1) per step, launched by PyTorch one by one
  graph   the same K ops captured once into torch.cuda.CUDAGraph, then g.replay() per step
Both rows check their result against the number of steps run. Without PyTorch or without a CUDA
device the script prints one line and exits with status 2.
"""

import argparse
import json
import sys
import time

ELEMS = 32
KS = [1, 10, 100, 1000]


def steps_per_rep(k):
    """Steps per repetition; the same rule as `bench`."""
    return max(10, min(1000, 2000 // k))


def summarize(samples):
    v = sorted(samples)
    n = len(v)
    rank = lambda q: v[min(n - 1, int(round(q * (n - 1))))]
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"median": median, "p10": rank(0.1), "p90": rank(0.9), "samples": n}


def measure(torch, step, reps, steps):
    """Two warm-up batches, then `reps` batches of `steps` steps, each ending in one synchronize."""
    for _ in range(2 * steps):
        step()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t) * 1e6 / steps)
    return summarize(samples)


def check(torch, x, steps_run, k, what):
    torch.cuda.synchronize()
    want = (steps_run * k) % (1 << 32)
    got = x.cpu().to(torch.int64) % (1 << 32)
    if not bool((got == want).all()):
        raise SystemExit(f"torch_graph: {what}: WRONG RESULT {got[0].item()}, expected {want}")


def run_k(torch, k, reps):
    steps = steps_per_rep(k)
    rows = {}

    # eager
    x = torch.zeros(ELEMS, dtype=torch.int32, device="cuda")

    def eager():
        for _ in range(k):
            x.add_(1)

    rows["eager"] = measure(torch, eager, reps, steps)
    check(torch, x, (2 + reps) * steps, k, f"eager K={k}")

    # graph: warm up on a side stream, capture, replay (the pattern of the PyTorch docs)
    y = torch.zeros(ELEMS, dtype=torch.int32, device="cuda")

    def ops():
        for _ in range(k):
            y.add_(1)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            ops()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ops()
    torch.cuda.synchronize()
    y.zero_()
    torch.cuda.synchronize()
    rows["graph"] = measure(torch, g.replay, reps, steps)
    check(torch, y, (2 + reps) * steps, k, f"graph K={k}")
    return steps, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=None, help="repetitions (default 200, 20 with --quick)")
    p.add_argument("--quick", action="store_true", help="fewer reps, K up to 100")
    p.add_argument("--json", default=None, help="also write the results as JSON to this path")
    a = p.parse_args()
    reps = a.reps if a.reps is not None else (20 if a.quick else 200)
    if reps < 5:
        print("torch_graph: --reps must be at least 5", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("torch_graph: PyTorch is not installed; nothing to measure", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_graph: PyTorch sees no CUDA device; nothing to measure", file=sys.stderr)
        return 2

    ks = [k for k in KS if not a.quick or k <= 100]
    device = torch.cuda.get_device_name(0)
    print(f"PyTorch {torch.__version__} (CUDA {torch.version.cuda}) on {device}; {reps} repetitions")
    print("chain of K x x.add_(1) on a 32-element int32 tensor per step")
    print("µs per step = wall time of N steps issued back-to-back, then one torch.cuda.synchronize(), divided by N")
    print()
    print(f"{'K':>5} {'row':<6}{'median µs':>11}{'p10':>10}{'p90':>10}{'/node':>9}{'eager/graph':>13}")
    results = []
    for k in ks:
        steps, rows = run_k(torch, k, reps)
        for name in ("eager", "graph"):
            s = rows[name]
            speedup = rows["eager"]["median"] / rows["graph"]["median"]
            extra = f"{speedup:>13.2f}" if name == "graph" else ""
            print(f"{k:>5} {name:<6}{s['median']:>11.2f}{s['p10']:>10.2f}{s['p90']:>10.2f}{s['median'] / k:>9.3f}{extra}")
            results.append({"k": k, "row": name, "steps_per_rep": steps, "us_per_step": s,
                            "us_per_node": s["median"] / k})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "cuda": torch.version.cuda, "device": device,
                       "reps": reps, "quick": a.quick, "rows": results}, f, indent=2)
            f.write("\n")
        print(f"JSON written to {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
