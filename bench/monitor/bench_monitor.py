#!/usr/bin/env python3
"""CPU cost and start-up of the per-node monitor, side by side with CodeCarbon.

    .venv/bin/python bench/monitor/bench_monitor.py --markdown docs/bench/monitor.md   # ~4 min
    .venv/bin/python bench/monitor/bench_monitor.py --baseline main     # section 6 beside main's daemons
    .venv/bin/python bench/monitor/bench_monitor.py --quick                            # ~2 min
    .venv/bin/python bench/monitor/bench_monitor.py --daemon-only --daemon-seconds 30 --fake-gpus 0,2,8

Runs as shipped: it first makes (or reuses) its own venv, ``~/.cache/hpclaunch/bench-venvs/monitor``,
with CodeCarbon from PyPI and this working tree's hpclaunch as a wheel (bench/monitor/peer_venv.py),
and re-runs itself there, so both tools are timed from one interpreter, installed as users install
them. Where pip cannot install CodeCarbon its sections say so and are skipped; where no venv can be
made at all it runs in the calling interpreter and says which install that is.

Sections (CPU time = time.process_time(), user+system of the process, threads included):

1. host path: hpclaunch HostSampler (cpu/mem from /proc by pread, or psutil; loadavg,
   RAPL and CPU temperature where this node has them, own CPU/RSS) - sample only, and
   sample + CSV row write; both the default /proc path and the psutil path.
2. CodeCarbon 3.x OfflineEmissionsTracker (offline, country FRA, no file, no network):
   its per-measurement work (_measure_power_and_energy + _monitor_power, both run once
   per second at measure_power_secs=1), called directly the same number of times.
3. Scheduled runs: the hpclaunch daemon loop and CodeCarbon's tracker, each in a fresh
   process, each left running RUN_S seconds at the same interval; CPU per interval,
   scheduling included, set-up and shutdown excluded.
4. NVML path against the fake NVML (tests/monitors/fake_nvml.py): the Python-side
   cost per sample per GPU (the driver's own time is not in it), 1, 4 and 8 GPUs.
5. NVML path against the real driver: skipped when there is no GPU.
6. Whole daemon at 1 Hz: the real ``python -m hpclaunch.monitors`` process, once per
   ``--fake-gpus`` count, and CodeCarbon's tracker at measure_power_secs=1 beside them,
   started in the same round, staggered over the interval (so they share the machine's conditions
   without waking at the same instant), ``--rounds`` times.
   0 GPUs is ``--no-nvml`` (host only); N > 0 injects the tests' fake NVML the way the
   daemon tests do (HPCLAUNCH_MONITOR_FAKE_NVML + a scenario file of N H100s), so the
   NVML figures are the Python side only, power trace included. hpclaunch's figures are
   the daemon's own ``monitor_stats`` event: loop CPU per sample. ``--baseline REF``: the
   daemons of commit REF too (its wheel, bench/monitor/peer_venv.py), in the same rounds,
   and this tree's CPU per sample over theirs, round by round.
7. Start-up, interleaved (floor, hpclaunch host only, hpclaunch 2 fake GPUs, CodeCarbon,
   then again): spawn of ``python -m hpclaunch.monitors`` to the time_unix of its first
   CSV row (host row; GPU row), against the spawn of a Python that imports CodeCarbon and
   returns from ``OfflineEmissionsTracker.start()``, and ``python -c pass``; and the CPU
   time of each of those processes, start to exit (stopped once its first sample is seen),
   which a loaded machine stretches far less than the wall time. Then one
   ``-X importtime`` run of each: what the imports cost.

Goals (issue 20): at 1 Hz, host only <= 0.25 ms CPU per sample, <= 0.15 ms per (fake) GPU
over host only, start-up to the first sample <= 150 ms. This machine is shared and noisy:
read the ratios taken in one run, and the load average printed with them.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import platform
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # daemons.py, startup.py, peer_venv.py; bench/benchlib.py
import benchlib  # noqa: E402  (bench/benchlib.py)
from daemons import FAKE, build_libnvml, fake_scenario, goal, load_fake, whole_daemon  # noqa: E402  (bench/monitor/daemons.py)
SPACED_N = 150
SPACED_GAP = 0.02


class _NoEvents:
    def emit(self, kind, detail=None, time_unix=None):
        return True


def cpu_per_call(fn, n: int, warm: int = 20) -> float:
    for _ in range(warm):
        fn()
    c0 = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - c0) / n


def cpu_per_spaced_call(fn, n: int, gap_s: float) -> float:
    """CPU per call when calls are ``gap_s`` apart, as in the daemon (cold caches)."""
    fn()
    tot = 0.0
    for _ in range(n):
        time.sleep(gap_s)
        c0 = time.process_time()
        fn()
        tot += time.process_time() - c0
    return tot / n


def fmt_us(s: float) -> str:
    return f"{s * 1e6:9.1f} us"


def core_pct(s_per_sample: float, hz: float = 1.0) -> str:
    return f"{100.0 * s_per_sample * hz:.4f} % of a core at {hz:g} Hz"


def host_path(n: int, tmp: str, fast: bool = True):
    from hpclaunch.monitors import schema
    from hpclaunch.monitors.host import HostSampler
    from hpclaunch.monitors.logfiles import CsvLog
    from hpclaunch.monitors.rapl import RaplReader
    from hpclaunch.monitors.thermal import CpuTemp
    ev = _NoEvents()
    rapl = RaplReader(events=ev)
    rapl.start()
    temp = CpuTemp(events=ev)
    temp.start()
    h = HostSampler("bench", ev, rapl if rapl.available else None, temp if temp.mode else None,
                    fast=fast)
    h.start()
    log = CsvLog(os.path.join(tmp, "bench.host.csv"), schema.HOST_SCHEMA, schema.HOST_COLUMNS)
    s_only = cpu_per_call(lambda: h.sample(time.time()), n)
    s_write = cpu_per_call(lambda: log.write_rows((h.sample(time.time()),)), n)
    s_cold = cpu_per_spaced_call(lambda: log.write_rows((h.sample(time.time()),)), SPACED_N, SPACED_GAP)
    log.close()
    h.close()
    notes = [f"RAPL: {'yes' if rapl.available else 'no (' + str(rapl.reason) + ')'}",
             f"CPU temperature: {temp.mode or 'no (' + str(temp.reason) + ')'}"]
    return s_only, s_write, s_cold, notes


def codecarbon_tracker(interval: float):
    logging.getLogger("codecarbon").setLevel(logging.ERROR)
    from codecarbon import OfflineEmissionsTracker
    return OfflineEmissionsTracker(country_iso_code="FRA", measure_power_secs=interval,
                                   save_to_file=False, log_level="error")


def codecarbon_path(n: int):
    import codecarbon
    tr = codecarbon_tracker(1.0)
    tr.start()
    tr._scheduler.stop()               # call its measurement directly, no timer threads
    tr._scheduler_monitor_power.stop()
    hw = [f"{type(x).__name__}({getattr(x, '_mode', '')})" for x in tr._hardware]
    measure = cpu_per_call(tr._measure_power_and_energy, n)
    monitor = cpu_per_call(tr._monitor_power, n)

    def both():
        tr._measure_power_and_energy()
        tr._monitor_power()
    cold = cpu_per_spaced_call(both, SPACED_N, SPACED_GAP)
    tr.stop()
    return codecarbon.__version__, hw, measure, monitor, cold


def _child_run(kind: str, run_s: float, interval: float) -> dict:
    """Runs in a fresh process (no threads left over from other sections)."""
    if kind == "daemon":
        from hpclaunch.monitors.daemon import Daemon, parse_args
        with tempfile.TemporaryDirectory() as tmp:
            args = parse_args(["--run-dir", tmp, "--interval", str(interval),
                               "--duration", str(run_s), "--no-nvml", "--host", "bench"])
            d = Daemon(args)
            d.run()  # its loop's CPU (set-up excluded) is in d.stats
            return {"cpu_s": d.stats["loop_cpu_s"], "intervals": d.samples}
    tr = codecarbon_tracker(interval)
    tr.start()  # set-up and final stop() excluded: only its timer threads' work is counted
    c0 = time.process_time()
    time.sleep(run_s)
    cpu = time.process_time() - c0
    tr.stop()
    return {"cpu_s": cpu, "intervals": max(1, int(run_s / interval))}


def scheduled_runs(run_s: float, interval: float):
    import json
    import subprocess
    out = {}
    for label, kind in (("hpclaunch daemon (host path, --no-nvml)", "daemon"),
                        ("codecarbon OfflineEmissionsTracker", "codecarbon")):
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind,
                            "--run-s", str(run_s), "--run-interval", str(interval)],
                           capture_output=True, text=True, check=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        out[label] = (res["cpu_s"], res["intervals"])
    return out


def nvml_fake_path(n: int, gpus: int):
    from hpclaunch.monitors.nvml import NvmlSampler
    fake = load_fake()
    sc = fake.default_scenario()
    sc["devices"] = [fake._h100(f"GPU-{i:08d}", i) for i in range(gpus)]
    fake.configure(sc)
    s = NvmlSampler(fake, "bench", _NoEvents())
    assert s.start()
    per = cpu_per_call(lambda: s.sample(time.time()), n)
    trace = cpu_per_call(s.drain_power_samples, max(50, n // 10), warm=2)
    cold = cpu_per_spaced_call(lambda: (s.sample(time.time()), s.drain_power_samples()),
                               SPACED_N, SPACED_GAP) if gpus == 1 else None
    s.close()
    return per / gpus, trace / gpus, cold


def nvml_real_path(n: int, counter_every_s: float = 5.0, interval: float = 1.0):
    """Per GPU: CPU of a sample without the costly counters, of one with them, and their mix at
    ``interval`` with the counters every ``counter_every_s`` (the daemon's defaults: 1 s, 5 s)."""
    try:
        import pynvml
    except ImportError as e:
        return None, f"nvidia-ml-py not installed ({e})"
    from hpclaunch.monitors.nvml import NvmlSampler
    s = NvmlSampler(pynvml, "bench", _NoEvents())
    if not s.start():
        return None, s.reason
    gpus = len(s.gpus)
    w0 = time.perf_counter()
    fast = cpu_per_call(lambda: s.sample(time.time(), counters=False), n)
    wall = (time.perf_counter() - w0) / (n + 20)
    full = cpu_per_call(lambda: s.sample(time.time(), counters=True), max(20, n // 10))
    trace = cpu_per_call(s.drain_power_samples, max(20, n // 20), warm=2)
    mix = fast + (full - fast) * min(1.0, interval / counter_every_s) if counter_every_s else full
    name = pynvml.nvmlDeviceGetName(s.gpus[0].handle)
    s.close()
    return (fast / gpus, full / gpus, mix / gpus, wall / gpus, trace / gpus, gpus, name), None


def paths(a, n: int, cc_why, section) -> None:
    """Sections 1 to 5: each path called in a loop, hot and spaced."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ps_only, ps_write, ps_cold, _ = host_path(n, tmp, fast=False)
        s_only, s_write, s_cold, notes = host_path(n, tmp)
        print("1. host path (hpclaunch)")
        print(f"   /proc pread path (default): sample only            {fmt_us(s_only)}   {core_pct(s_only)}")
        print(f"   /proc pread path (default): sample + CSV row write {fmt_us(s_write)}   {core_pct(s_write)}")
        print(f"   psutil path (fast=False):   sample only            {fmt_us(ps_only)}   {core_pct(ps_only)}")
        print(f"   psutil path (fast=False):   sample + CSV row write {fmt_us(ps_write)}   {core_pct(ps_write)}")
        print(f"   spaced {SPACED_GAP * 1000:g} ms apart (cold caches, as in the daemon), sample + write:")
        print(f"     /proc path {fmt_us(s_cold)}   {core_pct(s_cold)};  psutil path {fmt_us(ps_cold)}   "
              f"{core_pct(ps_cold)}")
        for x in notes:
            print(f"   {x}")
        rows.append(("host sample + CSV row, hot loop (`/proc`; psutil)",
                     f"{s_write * 1e6:.0f} µs; {ps_write * 1e6:.0f} µs", ""))
        rows.append((f"the same, calls {SPACED_GAP * 1000:g} ms apart", f"{s_cold * 1e6:.0f} µs; "
                     f"{ps_cold * 1e6:.0f} µs", ""))
        if cc_why is None:
            ver, hw, measure, monitor, cc_cold = codecarbon_path(n)
            cc = measure + monitor
            print(f"\n2. CodeCarbon {ver} OfflineEmissionsTracker, measure_power_secs=1 (hardware: {', '.join(hw)})")
            print(f"   _measure_power_and_energy {fmt_us(measure)}")
            print(f"   _monitor_power            {fmt_us(monitor)}")
            print(f"   per 1 s interval          {fmt_us(cc)}   {core_pct(cc)}")
            print(f"   ratio CodeCarbon / hpclaunch (sample+write): {cc / s_write:.2f}x "
                  f"(/proc path), {cc / ps_write:.2f}x (psutil path)")
            print(f"   spaced {SPACED_GAP * 1000:g} ms apart: {fmt_us(cc_cold)} per interval   "
                  f"{core_pct(cc_cold)};  ratio to hpclaunch /proc path {cc_cold / s_cold:.2f}x, "
                  f"psutil path {cc_cold / ps_cold:.2f}x")
            rows.append((f"CodeCarbon {ver} measurement (`_measure_power_and_energy` + `_monitor_power`), "
                         "hot; spaced", f"{cc * 1e6:.0f} µs; {cc_cold * 1e6:.0f} µs",
                         f"{cc / s_write:.1f}x; {cc_cold / s_cold:.1f}x ours"))
            print(f"\n3. scheduled runs, {a.run_s:g} s each at {a.run_interval:g} s interval (CPU per interval)")
            runs = scheduled_runs(a.run_s, a.run_interval)
            per = {}
            for k, (cpu, samples) in runs.items():
                per[k] = cpu / samples
                print(f"   {k:42s} {fmt_us(per[k])}  ({samples} intervals, {cpu * 1000:.1f} ms CPU)")
            vals = list(per.values())
            print(f"   ratio CodeCarbon / hpclaunch: {vals[1] / vals[0]:.2f}x")
            rows.append((f"both on a timer at {a.run_interval:g} s for {a.run_s:g} s, fresh processes "
                         "(ours; CodeCarbon)", f"{vals[0] * 1e6:.0f} µs; {vals[1] * 1e6:.0f} µs",
                         f"{vals[1] / vals[0]:.1f}x ours"))
        else:
            print(f"\n2., 3. CodeCarbon: skipped ({cc_why})")
    print("\n4. NVML path, fake NVML (Python-side cost only; the driver's time is not in it)")
    for g in (1, 4, 8):
        per_gpu, trace, cold = nvml_fake_path(n if g == 1 else max(200, n // g), g)
        print(f"   {g} GPU(s): {fmt_us(per_gpu)} per sample per GPU   "
              f"power-trace drain {fmt_us(trace)} per GPU   {core_pct(per_gpu * g)} for {g} GPU(s)")
        if cold is not None:
            print(f"     spaced {SPACED_GAP * 1000:g} ms apart, sample + drain: {fmt_us(cold)} per GPU")
            rows.append(("NVML path, fake driver, 1 GPU: sample, hot; sample + drain spaced",
                         f"{per_gpu * 1e6:.0f} µs; {cold * 1e6:.0f} µs", "Python side only"))
        elif g == 8:
            rows.append(("the same, 8 GPUs, hot, per GPU", f"{per_gpu * 1e6:.0f} µs", ""))
    print("\n5. NVML path, real driver")
    res, why = nvml_real_path(min(n, 2000))
    if res is None:
        print(f"   no GPU here: skipped ({why})")
    else:
        fast, full, mix, wall, trace, gpus, name = res
        print(f"   {gpus} x {name}, CPU per sample per GPU: {fmt_us(fast)} without the costly counters "
              f"({fmt_us(wall)} wall), {fmt_us(full)} with them;")
        print(f"   at 1 Hz with counters every 5 s (the defaults) {fmt_us(mix)} + power-trace drain "
              f"{fmt_us(trace)} = {fmt_us(mix + trace)} per GPU;  {core_pct((mix + trace) * gpus)}")
        rows.append((f"NVML path, {name}, 1 Hz, counters every 5 s, + drain, per GPU",
                     f"{(mix + trace) * 1e6:.0f} µs", "real driver"))
    section.para(f"**Paths in a loop** (sections 1–5; {n} calls each, CPU = `time.process_time()`; "
                 f"spaced = calls {SPACED_GAP * 1000:g} ms apart, caches cold as in the daemon):")
    section.table(("path", "CPU per sample", "note"), rows, "lrl")


def startup_section(n: int, codecarbon: bool, section=None) -> None:
    import json
    import startup
    print(f"\n7. start-up, {n} runs of each, interleaved (seconds from spawn)")
    with tempfile.TemporaryDirectory() as tmp:
        sc = os.path.join(tmp, "scenario2.json")
        with open(sc, "w") as f:
            json.dump(fake_scenario(2, 100), f)
        res = startup.runs(sys.executable, n, FAKE, sc, codecarbon)
    floor = res["python -c pass"]
    rows = []
    for label, r in res.items():
        wall, cpu = ([x * 1e3 for x in r[k]] for k in ("wall", "cpu"))
        rows.append((label, benchlib.fmt(wall, "ms", 0), f"{benchlib.ratio(r['wall'], floor['wall']):.1f}x",
                     benchlib.fmt(cpu, "ms", 0), f"{benchlib.ratio(r['cpu'], floor['cpu']):.1f}x"))
        print(f"   {label:55s} wall {benchlib.fmt(wall, 'ms', 0)} ({rows[-1][2]} the floor)   "
              f"CPU {benchlib.fmt(cpu, 'ms', 0)} ({rows[-1][4]})")
    verdicts = [goal(label.split(":")[0] + ", spawn to first row", statistics.median(r["wall"]) * 1e3, 150.0)
                for label, r in res.items() if label.startswith("hpclaunch")]
    verdicts += [goal(label.split(":")[0] + ", CPU of start-up, first sample and exit",
                       statistics.median(r["cpu"]) * 1e3, 150.0) + " (the wall time's goal, on the CPU time)"
                 for label, r in res.items() if label.startswith("hpclaunch")]
    for v in verdicts:
        print(f"   goal: {v}")
    imports = [("hpclaunch monitor (host only)", startup.importtime(
                    sys.executable, ["-m", "hpclaunch.monitors", "--run-dir", "{tmp}", "--duration", "0.05",
                                     "--no-nvml"]))]
    if codecarbon:
        imports.append(("import codecarbon", startup.importtime(sys.executable, ["-c", "import codecarbon"])))
    for label, it in imports:
        top = ", ".join(f"{name} {ms:.1f}" for name, ms in it["top"])
        print(f"   -X importtime, {label}: {it['total_ms']:.1f} ms of imports; costliest (ms, cumulative): {top}")
    if section is not None:
        section.para(f"**Start-up** (section 7): {n} runs of each, interleaved. Wall: hpclaunch, from the spawn "
                     "of `python -m hpclaunch.monitors` to the `time_unix` of its first CSV row; CodeCarbon, "
                     "from the spawn of a Python that imports it to the return of "
                     "`OfflineEmissionsTracker.start()`. CPU: user+system of that whole process, stopped as "
                     "soon as its first sample is seen (start-up, that sample, shutdown): it does not grow "
                     "with the waits for a core on a loaded machine as the wall time does. "
                     "Goal: <= 150 ms to the first sample.")
        section.table(("process", "wall, median [min–max]", "over the floor", "CPU, median [min–max]",
                       "over the floor"), rows)
        section.para("Goals (issue 20):\n" + "\n".join(f"- {v}" for v in verdicts))
        section.para("\n".join(f"- `-X importtime`, {label}: {it['total_ms']:.1f} ms of imports in one run; "
                               "costliest top-level imports (cumulative): " +
                               ", ".join(f"`{name}` {ms:.1f} ms" for name, ms in it["top"])
                               for label, it in imports))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--samples", type=int, default=5000, help="samples per measured path")
    ap.add_argument("--run-s", type=float, default=10.0, help="seconds of each scheduled run")
    ap.add_argument("--run-interval", type=float, default=0.1, help="interval of the scheduled runs")
    ap.add_argument("--quick", action="store_true",
                    help="1000 samples, 3 s scheduled runs, one 10 s daemon round, 5 start-ups")
    ap.add_argument("--daemon-seconds", type=float, default=20.0,
                    help="section 6: seconds of each round of the whole daemons at 1 Hz (0: skip)")
    ap.add_argument("--rounds", type=int, default=3, help="section 6: rounds (default 3)")
    ap.add_argument("--fake-gpus", default="0,2,8",
                    help="section 6: comma list of fake GPU counts (0 = host only) (default 0,2,8)")
    ap.add_argument("--startup-runs", type=int, default=15, help="section 7: runs of each (0: skip)")
    ap.add_argument("--daemon-only", action="store_true", help="run section 6 only")
    ap.add_argument("--baseline", metavar="REF", help="section 6: also run the daemons of this commit "
                    "(e.g. main, or the commit before a change) beside this tree's, and give the ratios")
    ap.add_argument("--here", action="store_true",
                    help="run in this interpreter: no bench venv (CodeCarbon only if importable here)")
    ap.add_argument("--markdown", metavar="PATH", help="write the section for docs/benchmarks.md there "
                    "(docs/bench/monitor.md), with its run context beside it as JSON")
    ap.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", choices=("daemon", "codecarbon"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        import json
        print(json.dumps(_child_run(a.child, a.run_s, a.run_interval)))
        return 0
    if not (a.here or a.in_venv):
        import peer_venv
        py, notes = peer_venv.ensure()
        if a.baseline:  # built here (the bench venv has no wheel package to build it with); said below
            peer_venv.baseline(REPO, a.baseline)
        for x in notes:
            print(f"# {x}", flush=True)
        if py is not None:
            os.execv(py, [py, os.path.abspath(__file__), *argv, "--in-venv"])
        print("# running in this interpreter instead", flush=True)
    global SPACED_N
    if a.quick:
        a.samples, a.run_s, a.rounds, a.daemon_seconds, a.startup_runs = 1000, 3.0, 1, 10.0, 5
        SPACED_N = 40
    try:
        importlib.import_module("codecarbon")
        cc_why = None
    except Exception as e:  # the peer is optional: its sections say why they are skipped
        cc_why = f"{type(e).__name__}: {e}"
    n = a.samples
    section = benchlib.Section("Monitor cost (`bench/monitor/bench_monitor.py`)",
                               "python bench/monitor/bench_monitor.py " + " ".join(
                                   x for x in argv if x != "--in-venv"))
    c = section.ctx
    print(f"# hpclaunch monitor benchmark  commit {c['commit']}  hpclaunch install: {c['install']}  python "
          f"{c['python']}  {platform.machine()}  {c['cpus']} CPUs  load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if cc_why:
        print(f"# CodeCarbon: not importable here ({cc_why}): its sections are skipped")
        section.para(f"CodeCarbon was not importable ({cc_why}): its figures are missing.")
    gpu_counts = [int(x) for x in a.fake_gpus.split(",") if x.strip()]
    baseline = None
    if a.baseline:
        import peer_venv
        site, note = peer_venv.baseline(REPO, a.baseline, build=not a.in_venv)
        print(f"# {note}")
        baseline = (a.baseline, site) if site else None
    libnvml, why = build_libnvml() if any(gpu_counts) else (None, None)
    if why:
        print(f"# the fake libnvidia-ml could not be built ({why}): no daemon on the real binding")
        section.para(f"The fake libnvidia-ml could not be built ({why}): no daemon on the real nvidia-ml-py.")
    if a.daemon_only:
        whole_daemon(a.daemon_seconds or 30.0, gpu_counts, a.rounds, cc_why is None, section, baseline, libnvml)
        section.write(a.markdown)
        return 0
    print(f"# samples per path: {n}; CPU = time.process_time() per call\n")
    paths(a, n, cc_why, section)
    if a.daemon_seconds > 0:
        whole_daemon(a.daemon_seconds, gpu_counts, a.rounds, cc_why is None, section, baseline, libnvml)
    if a.startup_runs > 0:
        startup_section(a.startup_runs, cc_why is None, section)
    section.para(f"Load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}. The machine "
                 "may be shared: read the ratios taken side by side in one run, not the absolute figures.")
    print()
    section.write(a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
