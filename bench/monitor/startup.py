"""Start-up of the monitor against CodeCarbon's tracker: bench_monitor.py's section 7.

Measured from outside, as bench/gpu/gpu_checks.py does: the time of the spawn, then the
``time_unix`` of the daemon's first CSV row (the sample's own time, so the polling here adds
nothing), or the time a child Python prints once ``OfflineEmissionsTracker.start()`` returned.
The kinds run interleaved, one of each in turn, so the machine's noise hits them alike.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

_CODECARBON_START = """
import json, logging, time
logging.getLogger("codecarbon").setLevel(logging.ERROR)
from codecarbon import OfflineEmissionsTracker
tr = OfflineEmissionsTracker(country_iso_code="FRA", measure_power_secs=1, save_to_file=False,
                             log_level="error")
tr.start()
print(json.dumps({"started": time.time()}), flush=True)
tr.stop()
"""


def first_row_time(path: str, deadline: float) -> Optional[float]:
    """time_unix of the first data row of a monitor CSV (its header and schema lines skipped)."""
    while time.time() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if line[:1].isdigit() and line.endswith("\n"):
                        return float(line.split(",", 1)[0])
        time.sleep(0.005)
    return None


def _env(extra: Optional[dict] = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCLAUNCH_", "CUDA_"))}
    env.update(extra or {})
    return env


def _daemon(py: str, tmp: str, csv: str, extra_args: List[str], env: dict) -> float:
    run_dir = tempfile.mkdtemp(dir=tmp)
    t0 = time.time()
    p = subprocess.Popen([py, "-m", "hpclaunch.monitors", "--run-dir", run_dir, "--host", "bench",
                          "--interval", "1", *extra_args], env=env, cwd=tmp,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = first_row_time(os.path.join(run_dir, "monitor", csv), t0 + 30)
    p.terminate()
    _, err = p.communicate(timeout=30)
    if first is None:
        raise RuntimeError(f"no {csv} row within 30 s: {err[-1000:]}")
    return first - t0


def _codecarbon(py: str, tmp: str) -> float:
    t0 = time.time()
    p = subprocess.run([py, "-c", _CODECARBON_START], capture_output=True, text=True, cwd=tmp,
                       env=_env(), timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"CodeCarbon tracker start failed: {p.stderr[-1000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["started"] - t0


def _floor(py: str, tmp: str) -> float:
    t0 = time.time()
    subprocess.run([py, "-c", "pass"], cwd=tmp, check=True)
    return time.time() - t0


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def runs(py: str, n: int, fake: str, scenario: str, codecarbon: bool) -> Dict[str, Dict[str, List[float]]]:
    """``n`` of each kind, interleaved: {label: {"wall": seconds from spawn to the first sample,
    "cpu": CPU seconds of the whole child, start to exit}}. The child is stopped as soon as its
    first sample is seen, so its CPU is its start-up, that sample and its shutdown; unlike the wall
    time it does not grow with the waits for a core on a loaded machine."""
    out: Dict[str, Dict[str, List[float]]] = {}
    gpu_env = _env({"HPCLAUNCH_MONITOR_FAKE_NVML": fake, "HPCLAUNCH_FAKE_NVML_SCENARIO": scenario})
    kinds = [("python -c pass", lambda tmp: _floor(py, tmp)),
             ("hpclaunch, host only: first host row",
              lambda tmp: _daemon(py, tmp, "bench.host.csv", ["--no-nvml"], _env())),
             ("hpclaunch, 2 fake GPUs: first GPU row",
              lambda tmp: _daemon(py, tmp, "bench.gpu.csv", [], gpu_env))]
    if codecarbon:
        kinds.append(("CodeCarbon: OfflineEmissionsTracker.start() returned", lambda tmp: _codecarbon(py, tmp)))
    with tempfile.TemporaryDirectory() as tmp:
        for label, fn in kinds:  # one unrecorded start of each: the page cache warm for all
            fn(tmp)
        for _ in range(n):
            for label, fn in kinds:
                cpu0 = _children_cpu()  # each child is reaped before fn returns
                wall = fn(tmp)
                got = out.setdefault(label, {"wall": [], "cpu": []})
                got["wall"].append(wall)
                got["cpu"].append(_children_cpu() - cpu0)
    return out


def importtime(py: str, args: List[str], top: int = 6) -> dict:
    """One ``-X importtime`` run: the total of the top-level imports (ms) and the costliest ones."""
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([py, "-X", "importtime", *[a.replace("{tmp}", tmp) for a in args]],
                           capture_output=True, text=True, cwd=tmp, env=_env(), timeout=120)
    rows = []
    for line in p.stderr.splitlines():  # "import time:  self_us | cumulative_us | <indent>name"
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].split("|", 2)
        if not name.startswith("  "):  # one space: imported at top level, not by another module
            rows.append((name.strip(), int(self_us), int(cum_us)))
    total = sum(c for _, _, c in rows)
    return {"total_ms": total / 1000.0,
            "top": [(n, c / 1000.0) for n, _, c in sorted(rows, key=lambda r: -r[2])[:top]]}


if __name__ == "__main__":  # a quick look: python startup.py
    print(json.dumps(importtime(sys.executable, ["-m", "hpclaunch.monitors", "--run-dir", "{tmp}",
                                                 "--duration", "0.05", "--no-nvml"]), indent=1))
