#!/usr/bin/env python3
"""What each NVML call the monitor makes costs on this driver: CPU and wall time per call.

    python bench/gpu/nvml_calls.py [--calls 40] [--load]

Every field id of the monitor's nvmlDeviceGetFieldValues batch alone, the batch whole, and the
other per-sample calls, each timed ``--calls`` times on GPU 0 (median and max, µs). ``--load`` runs
bench/gpu/gpu_load.py beside it so the figures are those of a busy GPU. Needs a GPU.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FIELDS = {186: "power instant", 185: "power average", 83: "total energy", 82: "memory temp",
          74: "clocks event: sw power cap (= perf policy power)", 75: "perf policy thermal", 76: "clocks event: sync boost",
          269: "clocks event: sw thermal", 270: "clocks event: hw thermal", 271: "clocks event: power brake"}


def timed(fn, n):
    cpu, wall = [], []
    fn()
    for _ in range(n):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        time.sleep(0.02)
    return statistics.median(cpu) * 1e6, statistics.median(wall) * 1e6, max(wall) * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--load", action="store_true")
    a = ap.parse_args(argv)
    import pynvml as nv
    load = None
    if a.load:
        load = subprocess.Popen([sys.executable, os.path.join(HERE, "gpu_load.py"), "--idle", "0", "--load", "600",
                                 "--idle-after", "0"], stdout=subprocess.DEVNULL)
        time.sleep(8)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    rows = []
    for fid, what in FIELDS.items():
        rows.append((f"field {fid} ({what})", *timed(lambda f=fid: nv.nvmlDeviceGetFieldValues(h, [f]), a.calls)))
    groups = {"batch of all 9": list(FIELDS), "power+avg+energy+memtemp": [186, 185, 83, 82],
              "the 5 clocks-event counters": [74, 76, 269, 270, 271],
              "every sample (monitor)": [186, 185, 82, 74, 76, 269],
              "every 5 s (monitor)": [83, 75, 270, 271], "energy only": [83],
              "power instant + energy": [186, 83]}
    for name, ids in groups.items():
        rows.append((f"fields: {name}", *timed(lambda i=ids: nv.nvmlDeviceGetFieldValues(h, i), a.calls)))
    calls = {
        "nvmlDeviceGetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h),
        "nvmlDeviceGetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "nvmlDeviceGetTemperature": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetMemoryInfo": lambda: nv.nvmlDeviceGetMemoryInfo(h),
        "nvmlDeviceGetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h),
        "nvmlDeviceGetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "nvmlDeviceGetEnforcedPowerLimit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
        "nvmlDeviceGetViolationStatus(POWER)": lambda: nv.nvmlDeviceGetViolationStatus(h, nv.NVML_PERF_POLICY_POWER),
        "nvmlDeviceGetViolationStatus(THERMAL)": lambda: nv.nvmlDeviceGetViolationStatus(h, nv.NVML_PERF_POLICY_THERMAL),
        "nvmlDeviceGetSamples(power, last 1 s)": lambda: nv.nvmlDeviceGetSamples(
            h, nv.NVML_TOTAL_POWER_SAMPLES, int((time.time() - 1) * 1e6)),
    }
    for name, fn in calls.items():
        try:
            rows.append((name, *timed(fn, a.calls)))
        except nv.NVMLError as e:
            rows.append((f"{name}: {e}", 0, 0, 0))
    # How far back the driver's power-sample buffer reaches (how often it must be drained)
    time.sleep(6)
    _, got = nv.nvmlDeviceGetSamples(h, nv.NVML_TOTAL_POWER_SAMPLES, 0)
    ts = sorted(x.timeStamp for x in got)
    buffer = (len(ts), (ts[-1] - ts[0]) / 1e6 if ts else 0.0)
    nv.nvmlShutdown()
    if load is not None:
        load.kill()
    print(f"# NVML call cost, GPU 0, {a.calls} calls each 20 ms apart, {'under load' if a.load else 'idle'}")
    print(f"{'call':56s} {'CPU µs':>9s} {'wall µs':>9s} {'max wall':>9s}")
    for name, cpu, wall, mx in rows:
        print(f"{name:56s} {cpu:9.1f} {wall:9.1f} {mx:9.1f}")
    print(f"power-sample buffer after 6 s idle: {buffer[0]} samples over {buffer[1]:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
