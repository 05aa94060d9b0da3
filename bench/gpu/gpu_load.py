#!/usr/bin/env python3
"""A known GPU load for the monitor's real-driver checks: idle, then bf16 matrix products, then idle.

    python bench/gpu/gpu_load.py --idle 10 --load 30 --idle-after 10

Prints one line per phase with its wall time and, for the load, the TFLOP/s reached, so a report's
busy window and energy can be set beside what the program did. Needs torch with CUDA.
"""
import argparse
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle", type=float, default=10.0, help="seconds idle before the load")
    ap.add_argument("--load", type=float, default=30.0, help="seconds of matrix products")
    ap.add_argument("--idle-after", type=float, default=10.0, help="seconds idle after the load")
    ap.add_argument("--n", type=int, default=8192, help="matrix size")
    a = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("gpu_load: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    x = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    t0 = time.time()
    print(f"phase idle start {t0:.3f}", flush=True)
    time.sleep(a.idle)
    t1 = time.time()
    print(f"phase load start {t1:.3f}", flush=True)
    n = 0
    while time.time() - t1 < a.load:
        for _ in range(20):
            x @ y
        torch.cuda.synchronize()
        n += 20
    t2 = time.time()
    tflops = 2 * a.n ** 3 * n / (t2 - t1) / 1e12
    print(f"phase load end {t2:.3f}: {n} products of {a.n}x{a.n} bf16, {tflops:.0f} TFLOP/s", flush=True)
    time.sleep(a.idle_after)
    print(f"phase idle end {time.time():.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
