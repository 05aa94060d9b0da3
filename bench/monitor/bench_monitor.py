#!/usr/bin/env python3
"""CPU cost of the per-node monitor, side by side with CodeCarbon.

    .venv/bin/python bench/monitor/bench_monitor.py            # about 30 s
    .venv/bin/python bench/monitor/bench_monitor.py --quick    # about 8 s
    .venv/bin/python bench/monitor/bench_monitor.py --daemon-only --daemon-seconds 30 --fake-gpus 0,2,8

Sections (CPU time = time.process_time(), user+system of this process, threads included):

1. host path: hpclaunch HostSampler (cpu/mem from /proc by pread, or psutil; loadavg,
   RAPL and CPU temperature where this node has them, own CPU/RSS) - sample only, and
   sample + CSV row write; both the default /proc path and the psutil path.
2. CodeCarbon 3.x OfflineEmissionsTracker (offline, country FRA, no file, no network):
   its per-measurement work (_measure_power_and_energy + _monitor_power, both run once
   per second at measure_power_secs=1), called directly the same number of times.
3. Scheduled runs: the hpclaunch daemon loop and CodeCarbon's tracker, each in a fresh
   process,
   each left running RUN_S seconds at the same interval; CPU per interval, scheduling
   included, set-up and shutdown excluded (CodeCarbon also runs its 1 s _monitor_power
   timer on top of the measurement timer).
4. NVML path against the fake NVML (tests/monitors/fake_nvml.py): the Python-side
   cost per sample per GPU (the driver's own time is not in it), 1, 4 and 8 GPUs.
5. NVML path against the real driver: skipped when there is no GPU.
6. Whole daemon (``--daemon-seconds S``, off by default): the real daemon process
   (``python -m hpclaunch.monitors``) at 1 Hz for S seconds, once per ``--fake-gpus``
   count, side by side (started together, so they share the machine's conditions).
   0 GPUs is ``--no-nvml`` (host only); N > 0 injects the tests' fake NVML the way
   the daemon tests do (HPCLAUNCH_MONITOR_FAKE_NVML + a scenario file of N H100s), so
   the NVML figures are the Python side only, power trace included. The figures are
   the daemon's own ``monitor_stats`` event: loop CPU per sample, % of a core, RSS.

Goal: <= 0.5 ms CPU per sample per device; < 0.1 % of a core at 1 Hz.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import platform
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FAKE = os.path.join(REPO, "tests", "monitors", "fake_nvml.py")
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


def load_fake():
    spec = importlib.util.spec_from_file_location("fake_nvml", FAKE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fake_nvml"] = mod
    spec.loader.exec_module(mod)
    return mod


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


def _fake_scenario(gpus: int, samples: int) -> dict:
    """N fake H100s as JSON: each series tabulated from the fake's own functions."""
    fake = load_fake()
    devs = []
    for i in range(gpus):
        d = fake._h100(f"GPU-bench-{i:04d}", i)
        d["series"] = {k: ([f(j) for j in range(samples)] if callable(f) else list(f))
                       for k, f in d["series"].items()}
        devs.append(d)
    return {"driver": "550.54.15", "devices": devs}


def daemon_runs(seconds: float, gpu_counts, interval: float = 1.0) -> dict:
    """Start one daemon per GPU count at once; returns {count: monitor_stats detail}."""
    import json
    import subprocess
    out, procs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in gpu_counts:
            run_dir = os.path.join(tmp, f"gpus{n}")
            os.makedirs(run_dir)
            env = dict(os.environ)
            for k in ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID",
                      "HPCLAUNCH_RUN_DIR"):
                env.pop(k, None)
            cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", str(interval),
                   "--duration", str(seconds), "--run-dir", run_dir, "--host", "bench"]
            if n == 0:
                cmd.append("--no-nvml")
            else:
                sc = os.path.join(tmp, f"scenario{n}.json")
                with open(sc, "w") as f:
                    json.dump(_fake_scenario(n, int(seconds / interval) + 10), f)
                env.update({"HPCLAUNCH_MONITOR_FAKE_NVML": FAKE, "HPCLAUNCH_FAKE_NVML_SCENARIO": sc})
            procs[n] = (subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True), run_dir)
        for n, (p, run_dir) in procs.items():
            _, err = p.communicate(timeout=seconds + 120)
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
            out[n] = stats
    return out


def print_daemon_runs(seconds: float, gpu_counts) -> None:
    print(f"\n6. whole daemon at 1 Hz for {seconds:g} s, side by side (python -m hpclaunch.monitors; "
          "fake NVML = Python side only; figures from its monitor_stats event)")
    res = daemon_runs(seconds, gpu_counts)
    for n, st in res.items():
        what = "host only (--no-nvml)" if n == 0 else f"{n} fake GPU(s)"
        print(f"   {what:22s} {st['cpu_s_per_sample'] * 1e3:7.3f} ms CPU/sample   "
              f"{st['core_pct']:.4f} % of a core   RSS {st.get('rss_mib')} MiB   "
              f"({st['samples']} samples, {st['skipped_slots']} skipped, max work "
              f"{st['max_work_s'] * 1e3:.1f} ms, loop CPU {st['loop_cpu_s']:.3f} s)")
    if 0 in res:
        base = res[0]["cpu_s_per_sample"]
        for n, st in res.items():
            if n:
                print(f"   per GPU over host only, {n} GPU(s): "
                      f"{(st['cpu_s_per_sample'] - base) / n * 1e3:.3f} ms CPU/sample")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=5000, help="samples per measured path")
    ap.add_argument("--run-s", type=float, default=10.0, help="seconds of each scheduled run")
    ap.add_argument("--run-interval", type=float, default=0.1, help="interval of the scheduled runs")
    ap.add_argument("--quick", action="store_true", help="1000 samples, 3 s scheduled runs")
    ap.add_argument("--daemon-seconds", type=float, default=0.0,
                    help="section 6: run the whole daemon at 1 Hz this long per GPU count (0: skip)")
    ap.add_argument("--fake-gpus", default="0,2,8",
                    help="section 6: comma list of fake GPU counts (0 = host only) (default 0,2,8)")
    ap.add_argument("--daemon-only", action="store_true", help="run section 6 only")
    ap.add_argument("--child", choices=("daemon", "codecarbon"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        import json
        print(json.dumps(_child_run(a.child, a.run_s, a.run_interval)))
        return 0
    global SPACED_N
    if a.quick:
        a.samples, a.run_s = 1000, 3.0
        SPACED_N = 40
    n = a.samples
    print(f"# hpclaunch monitor benchmark  python {platform.python_version()}  "
          f"{platform.machine()}  {os.cpu_count()} CPUs  {platform.processor() or ''}  "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    gpu_counts = [int(x) for x in a.fake_gpus.split(",") if x.strip()]
    if a.daemon_only:
        print_daemon_runs(a.daemon_seconds or 30.0, gpu_counts)
        return 0
    print(f"# samples per path: {n}; CPU = time.process_time() per call\n")
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

        try:
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
        except Exception as e:  # codecarbon is optional for this benchmark
            cc = None
            print(f"\n2. CodeCarbon: skipped ({type(e).__name__}: {e})")

        print(f"\n3. scheduled runs, {a.run_s:g} s each at {a.run_interval:g} s interval (CPU per interval)")
        if cc is not None:
            runs = scheduled_runs(a.run_s, a.run_interval)
            per = {}
            for k, (cpu, samples) in runs.items():
                per[k] = cpu / samples
                print(f"   {k:42s} {fmt_us(per[k])}  ({samples} intervals, {cpu * 1000:.1f} ms CPU)")
            vals = list(per.values())
            print(f"   ratio CodeCarbon / hpclaunch: {vals[1] / vals[0]:.2f}x")

    print("\n4. NVML path, fake NVML (Python-side cost only; the driver's time is not in it)")
    for g in (1, 4, 8):
        per_gpu, trace, cold = nvml_fake_path(n if g == 1 else max(200, n // g), g)
        print(f"   {g} GPU(s): {fmt_us(per_gpu)} per sample per GPU   "
              f"power-trace drain {fmt_us(trace)} per GPU   {core_pct(per_gpu * g)} for {g} GPU(s)")
        if cold is not None:
            print(f"     spaced {SPACED_GAP * 1000:g} ms apart, sample + drain: {fmt_us(cold)} per GPU")

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
    if a.daemon_seconds > 0:
        print_daemon_runs(a.daemon_seconds, gpu_counts)
    else:
        print("\n6. whole daemon: skipped (--daemon-seconds 30 to run it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
