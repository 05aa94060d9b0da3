#!/usr/bin/env python3
"""The monitor's start-up on a GPU node: spawn to the first CSV row, host only and with real NVML.

    python bench/gpu/startup_gpu.py [--runs 7]

Interleaved, one of each kind in turn (bench/monitor/startup.py's measure: the spawn's time, then
the ``time_unix`` of the daemon's first row): ``python -c pass`` (the floor), the daemon with
``--no-nvml``, the daemon on the real driver. Then what NVML's own start costs in one process:
``import pynvml``, ``nvmlInit``, the first handle. Needs a GPU.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "monitor"))
import startup  # noqa: E402  (bench/monitor/startup.py)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args(argv)
    env = startup._env()
    kinds = {"python -c pass": lambda tmp: startup._floor(sys.executable, tmp),
             "daemon, host only": lambda tmp: startup._daemon(sys.executable, tmp, "bench.host.csv",
                                                              ["--no-nvml"], env),
             "daemon, real NVML": lambda tmp: startup._daemon(sys.executable, tmp, "bench.gpu.csv", [], env)}
    got = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.runs):
            for k, fn in kinds.items():
                got[k].append(fn(tmp) * 1e3)
    for k, v in got.items():
        print(f"{k:20s} median {statistics.median(v):6.1f} ms  [{min(v):.1f}-{max(v):.1f}]  n={len(v)}")
    t0 = time.perf_counter()
    import pynvml
    t1 = time.perf_counter()
    pynvml.nvmlInit()
    t2 = time.perf_counter()
    pynvml.nvmlDeviceGetHandleByIndex(0)
    t3 = time.perf_counter()
    print(f"in one process: import pynvml {1e3 * (t1 - t0):.1f} ms, nvmlInit {1e3 * (t2 - t1):.1f} ms, "
          f"first handle {1e3 * (t3 - t2):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
