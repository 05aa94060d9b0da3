#!/usr/bin/env python3
"""The monitor's direct NVML paths against pynvml's own wrappers, on a real driver.

    python bench/gpu/nvml_direct.py [--calls 30] [--json FILE]

monitors/nvml_getters.py, nvml_batch.FieldBatch and nvml_batch.PowerSamples call libnvidia-ml's C
functions with arguments kept from call to call and unpack the answers from C memory; the tests run
them over a fake library. Here each is asked beside the pynvml wrapper it stands for, on every GPU:

- getters: the same value (stable ones equal; power, clocks, temperature, utilisation within a
  tolerance; a failure the same NVMLError code on both);
- the field batch: the same return code per field, cumulative counters ordered
  direct <= wrapper <= direct read after, instant values within a tolerance;
- power samples since one time stamp: the samples both answered (same time stamps) have the same
  values;
- the XID wait (monitors/xid.py) on an event set of every GPU: the same answer as
  ``nvmlEventSetWait_v2(set, 0)`` (NVML_ERROR_TIMEOUT when no XID is pending);
- the CPU per call of each path (median of ``--calls``, 20 ms apart: cold, as at 1 Hz).

Exit 0 when everything agreed; 1 with the disagreements listed. Needs a GPU (or the tests' fake
library on LD_LIBRARY_PATH).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

CUMULATIVE = {83, 74, 75, 76, 269, 270, 271}  # energy (mJ) and clocks-event times (ns)
FIELDS = [186, 185, 83, 82, 75, 74, 76, 269, 270, 271]
STABLE = {"power_limit", "memory.total"}
TOLERANT = {"temperature": ("abs", 3), "sm_clock": ("rel", 0.25), "mem_clock": ("rel", 0.25),
            "power_usage": ("rel", 0.35), "utilization.gpu": ("abs", 60), "utilization.memory": ("abs", 60),
            "memory.used": ("rel", 0.2), "memory.free": ("rel", 0.2)}
BAD: list = []


def bad(what: str) -> None:
    print(f"   DISAGREE {what}", flush=True)
    BAD.append(what)


def close(a, b, how) -> bool:
    kind, tol = how
    if kind == "abs":
        return abs(a - b) <= tol
    return abs(a - b) <= tol * max(abs(a), abs(b), 1)


def code(nv, fn):
    """(value, None) or (None, NVML error code)."""
    try:
        return fn(), None
    except nv.NVMLError as e:
        return None, e.value
    except AttributeError as e:  # a getter the binding lacks
        return None, str(e)


def flat(name, v):
    if hasattr(v, "_fields_"):
        return {f"{name}.{f}": getattr(v, f) for f, _ in v._fields_}
    return {name: v}


def public_call(nv, h, public, consts):
    return getattr(nv, public)(h, *[getattr(nv, c) for c in consts])


def cpu_us(fn, n: int) -> float:
    out = []
    for _ in range(n):
        time.sleep(0.02)
        c0 = time.thread_time_ns()
        try:
            fn()
        except Exception:  # noqa: BLE001 (a failing call is timed too)
            pass
        out.append((time.thread_time_ns() - c0) / 1e3)
    return statistics.median(out)


def check_gpu(nv, i: int, calls: int) -> dict:
    from hpclaunch.monitors.nvml_batch import FieldBatch, PowerSamples, results
    from hpclaunch.monitors.nvml_getters import GETTERS, Getters

    h = nv.nvmlDeviceGetHandleByIndex(i)
    g = Getters(nv, h)
    timing = {}
    print(f"\n GPU {i}: {code(nv, lambda: nv.nvmlDeviceGetName(h))[0]}", flush=True)
    for name, (public, consts, _result) in GETTERS.items():
        direct_fn = getattr(g, name)
        dv, de = code(nv, direct_fn)
        dflat = flat(name, dv) if de is None else {}
        pv, pe = code(nv, lambda: public_call(nv, h, public, consts))
        if de != pe:
            bad(f"GPU {i} {name}: direct error {de}, pynvml error {pe}")
            continue
        if de is not None:
            print(f"   {name:22s} both raise {de}")
        for key, a in dflat.items():
            b = flat(name, pv)[key]
            if key == "energy_counter":  # read first, so never above the wrapper's
                ok = a <= b and close(a, b, ("rel", 0.01))
            elif key in STABLE or key not in TOLERANT:
                ok = a == b
            else:
                ok = close(a, b, TOLERANT[key])
            if not ok:
                bad(f"GPU {i} {key}: direct {a!r}, pynvml {b!r}")
        timing[name] = (cpu_us(direct_fn, calls), cpu_us(lambda: public_call(nv, h, public, consts), calls))
        print(f"   {name:22s} {str(dflat)[:70]:70s} direct {timing[name][0]:6.1f} µs  pynvml {timing[name][1]:6.1f} µs")

    batch = FieldBatch(nv, h, FIELDS)
    if batch._array is None:
        bad(f"GPU {i}: the field batch took no direct path with this binding")
    d1 = batch.read()
    w = results(nv.nvmlDeviceGetFieldValues(h, [(f, 0) for f in FIELDS]))
    d2 = batch.read()
    for f, (r1, v1), (rw, vw), (r2, v2) in zip(FIELDS, d1, w, d2):
        if not (r1 == rw == r2):
            bad(f"GPU {i} field {f}: return codes direct {r1}, pynvml {rw}, direct after {r2}")
        elif r1:
            print(f"   field {f:3d}: not supported by both (NVML return {r1})")
        elif f in CUMULATIVE:
            if not (v1 <= vw <= v2):
                bad(f"GPU {i} field {f} (counter): direct {v1}, pynvml {vw}, direct after {v2} not in order")
        elif not close(v1, vw, ("rel", 0.35)) and not close(v1, vw, ("abs", 5)):
            bad(f"GPU {i} field {f}: direct {v1}, pynvml {vw}")
        if not r1:
            print(f"   field {f:3d}: {v1!r} / {vw!r} / {v2!r}")
    timing["field batch"] = (cpu_us(batch.read, calls),
                             cpu_us(lambda: results(nv.nvmlDeviceGetFieldValues(h, [(f, 0) for f in FIELDS])), calls))

    ps = PowerSamples(nv, h)
    if ps._lookup is None:
        bad(f"GPU {i}: the power samples took no direct path with this binding")
    since = 0
    time.sleep(0.5)
    try:
        vtype, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_TOTAL_POWER_SAMPLES, since)
        wrapper = {s.timeStamp: s.sampleValue.uiVal for s in samples}
        direct = dict(ps.read(since))
        common = set(wrapper) & set(direct)
        differ = [t for t in common if wrapper[t] != direct[t]]
        print(f"   power samples: pynvml {len(wrapper)}, direct {len(direct)}, both {len(common)}, "
              f"value type {vtype}, differing {len(differ)}")
        if not common or differ:
            bad(f"GPU {i} power samples: {len(common)} in common, {len(differ)} differ")
        last = max(direct) if direct else 0
        timing["power samples"] = (cpu_us(lambda: ps.read(last), calls),
                                   cpu_us(lambda: nv.nvmlDeviceGetSamples(h, nv.NVML_TOTAL_POWER_SAMPLES, last),
                                          calls))
    except nv.NVMLError as e:
        de = code(nv, lambda: ps.read(since))[1]
        print(f"   power samples: pynvml raises {e.value}, direct {de}")
        if de != e.value:
            bad(f"GPU {i} power samples: pynvml error {e.value}, direct {de}")
    for k in ("field batch", "power samples"):
        if k in timing:
            print(f"   {k:22s} direct {timing[k][0]:7.1f} µs  pynvml {timing[k][1]:7.1f} µs")
    return timing


def check_xid_wait(nv, calls: int) -> dict:
    """The XID poll's direct wait beside pynvml's wrapper, on one event set of every GPU."""
    from hpclaunch.monitors.xid import _TIMEOUT, XID_EVENT, _RawWait

    raw = _RawWait.of(nv, "nvmlEventSetWait_v2")
    if raw is None:
        bad("the XID wait took no direct path with this binding")
        return {}
    es = nv.nvmlEventSetCreate()
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            try:
                nv.nvmlDeviceRegisterEvents(nv.nvmlDeviceGetHandleByIndex(i), XID_EVENT, es)
            except nv.NVMLError as e:
                print(f"\n GPU {i}: no XID registration ({e})")
        pe = code(nv, lambda: nv.nvmlEventSetWait_v2(es, 0))[1]
        ret = raw(es)
        print(f"\n XID wait: pynvml {'event' if pe is None else 'raises ' + str(pe)}, direct answers {ret}")
        if pe is not None and ret != pe or pe is None and ret not in (0, _TIMEOUT):
            bad(f"XID wait: pynvml error {pe}, direct return {ret}")
        t = (cpu_us(lambda: raw(es), calls), cpu_us(lambda: code(nv, lambda: nv.nvmlEventSetWait_v2(es, 0)), calls))
        print(f"   {'XID wait':22s} direct {t[0]:7.1f} µs  pynvml {t[1]:7.1f} µs")
        return {"XID wait": t}
    finally:
        nv.nvmlEventSetFree(es)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--json", help="write the timings here")
    a = ap.parse_args(argv)
    import pynvml as nv
    nv.nvmlInit()
    print(f"driver {nv.nvmlSystemGetDriverVersion()}, nvidia-ml-py {getattr(nv, '__version__', '?')}")
    timings = {i: check_gpu(nv, i, a.calls) for i in range(nv.nvmlDeviceGetCount())}
    timings["all"] = check_xid_wait(nv, a.calls)
    nv.nvmlShutdown()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({str(i): {k: {"direct_us": d, "pynvml_us": p} for k, (d, p) in t.items()}
                       for i, t in timings.items()}, f, indent=1)
    print(f"\n{len(BAD)} disagreement(s)" + (": " + "; ".join(BAD) if BAD else ""))
    return 1 if BAD else 0


if __name__ == "__main__":
    sys.exit(main())
