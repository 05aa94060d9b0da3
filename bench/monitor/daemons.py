"""The whole daemon at 1 Hz, side by side with CodeCarbon's tracker: bench_monitor.py's section 6.

One ``python -m hpclaunch.monitors`` process per fake GPU count (0 = ``--no-nvml``), and CodeCarbon's
tracker beside them, all started in the same round, so they share the machine's conditions. Their
starts are staggered by the interval over the number of processes: a node runs one daemon, and
processes that all woke at the same instant on two cores measured each other's contention (each
one's CPU per sample then moved by +-20 % from round to round).
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402  (bench/benchlib.py)
REPO = os.path.dirname(os.path.dirname(HERE))
BENCH = os.path.join(HERE, "bench_monitor.py")  # its --child codecarbon runs the tracker alone
FAKE = os.path.join(REPO, "tests", "monitors", "fake_nvml.py")
FLOOR = os.path.join(HERE, "floor.py")
FLOORS = ("wake", "host", "row")  # floor.py's modes, run beside a host-only daemon
C_FLOORS = ("c-wake", "c-host")  # floor.c's, beside them: the same wake-up and syscalls without Python
LIBNVML_SRC = os.path.join(REPO, "tests", "monitors", "fake_libnvml.c")
LIB = "libnvml"  # key prefix of the daemons on the real binding over the fake C library


def build_libnvml() -> tuple:
    """(directory holding a fresh libnvidia-ml.so.1 built from tests/monitors/fake_libnvml.c, None),
    or (None, why not)."""
    d = os.path.join(os.path.expanduser("~"), ".cache", "hpclaunch", "bench-libnvml")
    os.makedirs(d, exist_ok=True)
    p = subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", os.path.join(d, "libnvidia-ml.so.1"), LIBNVML_SRC],
                       capture_output=True, text=True)
    return (d, None) if p.returncode == 0 else (None, f"cc failed: {p.stderr.strip()[-300:]}")


def build_floor_c() -> Optional[str]:
    """bench/monitor/floor.c built into the cache folder: its path, or None without a C compiler."""
    d = os.path.join(os.path.expanduser("~"), ".cache", "hpclaunch", "bench-floor")
    os.makedirs(d, exist_ok=True)
    exe = os.path.join(d, "floor-c")
    try:
        p = subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "floor.c")], capture_output=True, text=True)
    except OSError:
        return None
    return exe if p.returncode == 0 else None


def load_fake():
    spec = importlib.util.spec_from_file_location("fake_nvml", FAKE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fake_nvml"] = mod
    spec.loader.exec_module(mod)
    return mod


def fake_scenario(gpus: int, samples: int) -> dict:
    """N fake H100s as JSON: each series tabulated from the fake's own functions."""
    fake = load_fake()
    devs = []
    for i in range(gpus):
        d = fake._h100(f"GPU-bench-{i:04d}", i)
        d["series"] = {k: ([f(j) for j in range(samples)] if callable(f) else list(f))
                       for k, f in d["series"].items()}
        devs.append(d)
    return {"driver": "550.54.15", "devices": devs}


def _daemon_start(key, tmp: str, seconds: float, interval: float, libnvml: Optional[str],
                  baseline_site: Optional[str]):
    """A function that starts the daemon of ``key`` (GPU count, or (kind, count)): (Popen, run dir)."""
    n = key[1] if isinstance(key, tuple) else key
    run_dir = os.path.join(tmp, f"gpus{n}" + (f"-{key[0]}" if isinstance(key, tuple) else ""))
    os.makedirs(run_dir)
    env = dict(os.environ)
    for k in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID", "HPCLAUNCH_RUN_DIR"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", str(interval),
           "--duration", str(seconds), "--run-dir", run_dir, "--host", "bench"]
    if n == 0:
        cmd.append("--no-nvml")
    elif isinstance(key, tuple) and key[0].endswith(LIB):
        env.update({"LD_LIBRARY_PATH": libnvml, "FAKE_LIBNVML_GPUS": str(n)})
    else:
        sc = os.path.join(tmp, f"scenario{n}.json")
        if not os.path.exists(sc):  # written once, before any daemon starts: the baseline's daemon of
            # this count reads it too, and rewriting it could hand a started daemon a half-written file
            with open(sc + ".tmp", "w") as f:
                json.dump(fake_scenario(n, int(seconds / interval) + 10), f)
            os.replace(sc + ".tmp", sc)
        env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE, "HPCLAUNCH_FAKE_NVML_SCENARIO": sc})
    if isinstance(key, tuple) and key[0].startswith("baseline"):
        env["PYTHONPATH"] = baseline_site
    return lambda: (subprocess.Popen(cmd, env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True), run_dir)


def _floor_start(mode: str, tmp: str, seconds: float, interval: float, floor_c: Optional[str] = None):
    cmd = [floor_c, mode[2:]] if mode.startswith("c-") else [sys.executable, FLOOR, mode]
    return lambda: (subprocess.Popen(cmd + [str(seconds), str(interval), tmp], cwd=tmp,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), None)


def daemon_runs(seconds: float, gpu_counts, interval: float = 1.0, codecarbon: bool = False,
                baseline_site: Optional[str] = None, libnvml: Optional[str] = None, rotate: int = 0) -> dict:
    """Start one daemon per GPU count in one round (and CodeCarbon's tracker beside them when
    ``codecarbon``; and, with ``baseline_site``, one more per count importing hpclaunch from that
    directory: an older commit's code); returns {count: monitor_stats detail}, {("baseline",
    count): ...}, "codecarbon": {"cpu_s_per_sample"}, and with a host-only daemon the floors
    {("floor", mode): {"cpu_s_per_sample"}} (floor.py; "c-wake" and "c-host" from floor.c where a C
    compiler is). ``libnvml``: a directory holding the fake
    libnvidia-ml.so.1; each GPU count also runs on the real nvidia-ml-py over it: {(LIB, count): ...}
    (and {("baseline-" + LIB, count): ...})."""
    out, procs = {}, {}
    keys = list(gpu_counts) + ([("baseline", n) for n in gpu_counts] if baseline_site else [])
    if libnvml:
        keys += [(LIB, n) for n in gpu_counts if n] + \
            ([("baseline-" + LIB, n) for n in gpu_counts if n] if baseline_site else [])
    floors = FLOORS if 0 in gpu_counts else ()
    floor_c = build_floor_c() if floors else None
    if floor_c:
        floors += C_FLOORS
    with tempfile.TemporaryDirectory() as tmp:
        starts = [(key, _daemon_start(key, tmp, seconds, interval, libnvml, baseline_site)) for key in keys]
        starts += [(("floor", mode), _floor_start(mode, tmp, seconds, interval, floor_c)) for mode in floors]
        if codecarbon:
            starts.append(("codecarbon", lambda: (subprocess.Popen(
                [sys.executable, BENCH, "--child", "codecarbon", "--run-s", str(seconds),
                 "--run-interval", str(interval)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), None)))
        # Each process's sample grid a step after the one before; the order turns by one each round,
        # so that no process always wakes right after the same other one (whose wake-up leaves the
        # shared interpreter's code warm in the caches).
        step = interval / max(1, len(starts))
        rotate %= max(1, len(starts))
        t_start = time.monotonic()
        for i, (key, start) in enumerate(starts[rotate:] + starts[:rotate]):
            time.sleep(max(0.0, t_start + i * step - time.monotonic()))
            procs[key] = start()
        cc = procs.pop("codecarbon", (None, None))[0]
        for key, (p, run_dir) in procs.items():
            n = key[1] if isinstance(key, tuple) else key
            res, err = p.communicate(timeout=seconds + 120)
            if isinstance(key, tuple) and key[0] == "floor":
                if p.returncode != 0:
                    raise RuntimeError(f"floor {n} exited {p.returncode}: {err[-2000:]}")
                out[key] = json.loads(res.strip().splitlines()[-1])
                continue
            if p.returncode != 0:
                raise RuntimeError(f"daemon with {n} fake GPUs exited {p.returncode}: {err[-2000:]}")
            stats = None
            with open(os.path.join(run_dir, "monitor", "bench.events.jsonl")) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec["kind"] == "monitor_stats":
                        stats = rec["detail"]
            if stats is None or (n and stats.get("gpus") != n):
                raise RuntimeError(f"daemon with {n} fake GPUs: no monitor_stats for {n} GPUs: {stats}")
            out[key] = stats
        if cc is not None:
            res, err = cc.communicate(timeout=seconds + 120)
            if cc.returncode != 0:
                raise RuntimeError(f"CodeCarbon's tracker exited {cc.returncode}: {err[-2000:]}")
            res = json.loads(res.strip().splitlines()[-1])
            out["codecarbon"] = {"cpu_s_per_sample": res["cpu_s"] / res["intervals"]}
    return out


def _label(n, base_name: str = "baseline") -> str:
    if isinstance(n, tuple) and n[0] == "floor":
        return {"wake": "floor: Python waking at 1 Hz, nothing else",
                "host": "floor: + the host row's syscalls, no Python work",
                "row": "floor: + the least Python that makes the row",
                "c-wake": "floor in C: waking at 1 Hz, nothing else",
                "c-host": "floor in C: + the host row's syscalls"}[n[1]]
    if isinstance(n, tuple) and n[0] == LIB:
        return f"hpclaunch, {n[1]} GPU{'s' if n[1] > 1 else ''}, pynvml + fake libnvidia-ml"
    if isinstance(n, tuple):
        return _label(n[1] if n[0] == "baseline" else (LIB, n[1])).replace("hpclaunch", f"hpclaunch {base_name}", 1)
    return "CodeCarbon tracker, 1 s" if n == "codecarbon" else \
        "hpclaunch, host only" if n == 0 else f"hpclaunch, {n} fake GPU{'s' if n > 1 else ''}"


def whole_daemon(seconds: float, gpu_counts, rounds: int, codecarbon: bool, section=None,
                 baseline: Optional[tuple] = None, libnvml: Optional[str] = None) -> None:
    """``baseline``: (name, site directory) of an older commit's hpclaunch, run beside this one;
    ``libnvml``: the fake C library's directory (build_libnvml), for the daemons on the real binding."""
    print(f"\n6. whole daemon at 1 Hz, {rounds} round(s) of {seconds:g} s, started in the same round, staggered "
          "(python -m hpclaunch.monitors; fake NVML = Python side only; figures from its monitor_stats event)")
    per: dict = {}
    loads = []
    for r in range(rounds):
        load = os.getloadavg()[0]
        loads.append(load)
        res = daemon_runs(seconds, gpu_counts, codecarbon=codecarbon, baseline_site=baseline and baseline[1],
                          libnvml=libnvml, rotate=r)
        for n, st in res.items():
            per.setdefault(n, []).append(st["cpu_s_per_sample"] * 1e3)
        print(f"   round {r + 1}: load {load:.2f}; " + ", ".join(
            f"{_label(n)} {st['cpu_s_per_sample'] * 1e3:.3f} ms" for n, st in res.items()), flush=True)
    floor = {n[1]: per.pop(n) for n in list(per) if isinstance(n, tuple) and n[0] == "floor"}
    old = {(n[1] if n[0] == "baseline" else (LIB, n[1])): per.pop(n) for n in list(per)
           if isinstance(n, tuple) and n[0].startswith("baseline")}
    base = per.get(0)
    rows, verdicts = [], []
    if base:
        verdicts.append(goal("host only", statistics.median(base), 0.25))
        if floor.get("row"):  # the bound a Python daemon meets at best, from the same rounds
            verdicts.append(goal("floor: + the least Python that makes the row (no daemon, a bound)",
                                 statistics.median(floor["row"]), 0.25))
    per_gpu: dict = {}
    for driver in ("fake pynvml", LIB):
        gpus = sorted(n for n in per if n not in (0, "codecarbon") and isinstance(n, tuple) == (driver == LIB))
        what = "" if driver != LIB else ", pynvml + fake libnvidia-ml"
        # Per GPU over host only, round by round (the daemons of a round ran side by side), then the
        # median over the rounds; and the slope between the fewest and the most GPUs, which leaves out
        # what the GPU path costs once per sample whatever the count (XID poll, two more CSV writes).
        if base:
            per_gpu.update({n: [(x - h) / (n[1] if isinstance(n, tuple) else n) for x, h in zip(per[n], base)]
                            for n in gpus})
        for n in gpus:
            count = n[1] if isinstance(n, tuple) else n
            verdicts.append(goal(f"per GPU over host only, {count} GPUs{what}", statistics.median(per_gpu[n]), 0.15))
        if base and len(gpus) > 1:
            lo, hi = (g[1] if isinstance(g, tuple) else g for g in (gpus[0], gpus[-1]))
            slope = [(b_ - a_) / (hi - lo) for a_, b_ in zip(per[gpus[0]], per[gpus[-1]])]
            verdicts.append(goal(f"per GPU added, {lo} to {hi} GPUs{what} (slope)", statistics.median(slope), 0.15))
            print(f"   per GPU added, {lo} to {hi} GPUs{what}: {benchlib.fmt(slope, 'ms')}")
    for n, xs in per.items():
        gpu = benchlib.fmt(per_gpu[n], "ms") if n in per_gpu else ""
        rows.append((_label(n), benchlib.fmt(xs, "ms"), gpu,
                     f"{benchlib.ratio(xs, base):.2f}x" if base else ""))
        print(f"   {_label(n):28s} {benchlib.fmt(xs, 'ms')}   per GPU over host only {gpu or '-'}")
    for v in verdicts:
        print(f"   goal: {v}")
    if section is not None:
        section.para(f"**Whole daemon at 1 Hz** (section 6): {rounds} rounds of {seconds:g} s, each round all "
                     "started together, their sample grids staggered over the interval (a node runs one "
                     "daemon: none waits for a core another woke on at the same instant), the start order "
                     "turned by one each round; CPU per sample from the daemon's own `monitor_stats` (CodeCarbon: "
                     "its process's CPU over the run, per 1 s measurement). Fake NVML = the Python side only, "
                     "power trace included: `N fake GPUs` replace pynvml by tests/monitors/fake_nvml.py (its own "
                     "Python replay is in the figure); `pynvml + fake libnvidia-ml` keep the real nvidia-ml-py "
                     "binding over tests/monitors/fake_libnvml.c (what a GPU node's daemon runs, less the "
                     "driver's own time). Per GPU: round by round, then the median over the rounds. "
                     f"Load average (1 min) at the start of each round: {', '.join(f'{x:.2f}' for x in loads)}.")
        section.table(("process", "CPU per sample, median [min–max]", "per GPU over host only",
                       "over host only"), rows)
        if verdicts:
            section.para("Goals (issue 20):\n" + "\n".join(f"- {v}" for v in verdicts))
    if floor and base:
        _against_floor(base, floor, section)
    if old:
        _against_baseline(per, old, baseline[0], section)


def _against_floor(base: list, floor: dict, section=None) -> None:
    """The host-only daemon over floor.py's processes, round by round (they ran side by side)."""
    rows = []
    for mode, xs in floor.items():
        over = [a - b for a, b in zip(base, xs)]
        rows.append((_label(("floor", mode)), benchlib.fmt(xs, "ms"), benchlib.fmt(over, "ms"),
                     benchlib.fmt([a / b for a, b in zip(base, xs)], "x", 2)))
        print(f"   {_label(('floor', mode)):50s} {benchlib.fmt(xs, 'ms')}; hpclaunch host only over it "
              f"{benchlib.fmt(over, 'ms')}")
    if section is not None:
        section.para("**The floor**, in the same rounds (`bench/monitor/floor.py`): a Python process waking on "
                     "the daemon's grid and doing nothing, and the same doing only the host row's syscalls "
                     "(three `pread`s of kept-open /proc files, `getloadavg`, `process_time`, one 100-byte "
                     "append), without parsing or formatting. What a host-only daemon costs above it is its "
                     "Python work. The third also makes the row, with the least Python it takes, in one "
                     "function (fields by position, one `%` format): what a Python daemon that did nothing "
                     "but this row would cost, a bound under which no daemon written in Python gets here. The "
                     "two in C (`bench/monitor/floor.c`) wake on the same grid and make the same syscalls with "
                     "no interpreter: what of each floor is the machine's (the kernel waking a process, the "
                     "/proc files made, the append), not Python's:")
        section.table(("process", "CPU per sample, median [min–max]", "hpclaunch host only over it",
                       "hpclaunch host only / it"), rows)


def _against_baseline(per: dict, old: dict, name: str, section=None) -> None:
    """This tree's daemons over the baseline's, round by round (they ran side by side)."""
    rows = []
    for n, xs in old.items():
        ratios = [a / b for a, b in zip(per[n], xs)]
        rows.append((_label(n).replace("hpclaunch, ", ""), benchlib.fmt(xs, "ms"), benchlib.fmt(per[n], "ms"),
                     benchlib.fmt(ratios, "x", 2)))
        print(f"   {_label(n)}: {name} {benchlib.fmt(xs, 'ms')}, this tree {benchlib.fmt(per[n], 'ms')}, "
              f"ratio {benchlib.fmt(ratios, 'x', 2)}")
    if section is not None:
        section.para(f"**This tree against {name}**, the same daemons from that commit's wheel, started in the "
                     "same rounds beside the ones above (CPU per sample; ratio round by round, this tree over "
                     f"{name}):")
        section.table(("daemon", name, "this tree", "ratio"), rows)


def goal(what: str, value_ms: float, goal_ms: float) -> str:
    return f"{what}: {value_ms:.3f} ms, goal <= {goal_ms:g} ms: {'met' if value_ms <= goal_ms else 'NOT met'}"
