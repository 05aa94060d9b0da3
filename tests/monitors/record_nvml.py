"""Record a real driver for the fake: a ``pynvml`` stand-in that forwards to the real one.

Load it the way the daemon loads the fake (``HPCLAUNCH_MONITOR_FAKE_NVML=.../record_nvml.py``) on a
machine with a GPU. Every NVML call the monitor makes goes to nvidia-ml-py's ``pynvml`` unchanged;
on the way back its result (or error) is appended to a scenario in the format of
``tests/monitors/fake_nvml.py`` (per device: ``series`` under the fake's keys, ``unsupported``,
``unknown_fields``, ``event_types``), and its wall time is added to a per-function table. At
``nvmlShutdown`` (and at exit) the scenario is written to ``$HPCLAUNCH_NVML_RECORD`` (JSON) with
``recorded`` facts: GPU names, driver, the calls' timings and the power samples' spacing.

The fake replays each series call by call, so a daemon run at the recorded interval sees the values
the real GPU gave, in order. Nothing here is imported by hpclaunch itself.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import sys
import time
from collections import defaultdict

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)
import fake_nvml as _fake  # noqa: E402  (the key names the fake replays)

sys.path.pop(0)

# What is recorded: the real binding, or (to test this module) a module file named here.
_FROM = os.environ.get("HPCLAUNCH_NVML_RECORD_FROM")
if _FROM:
    import importlib.util
    _spec = importlib.util.spec_from_file_location("hpclaunch_recorded_nvml", _FROM)
    _real = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _real
    _spec.loader.exec_module(_real)
else:
    import pynvml as _real  # noqa: E402

_KEY_OF_FIELD = dict(_fake._FIELD_KEYS)
_NOT_THERE = {3, 4, 13}           # NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND
_INVALID = 2

_devices: dict = {}               # index -> scenario device
_index_of: dict = {}              # handle address -> index
_timing = defaultdict(lambda: [0, 0.0, 0.0])   # name -> [calls, total s, max s]
_trace_gaps: list = []            # spacing of the driver's buffered power samples, µs
_facts: dict = {"names": {}, "started_unix": time.time()}
_written = [False]


def __getattr__(name):            # constants, exception classes, anything not wrapped below
    return getattr(_real, name)


NVMLError = _real.NVMLError


def _addr(handle) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


def _dev(handle) -> dict:
    return _devices[_index_of[_addr(handle)]]


def _timed(name, fn, *args):
    t0 = time.perf_counter()
    try:
        return fn(*args)
    finally:
        dt = time.perf_counter() - t0
        t = _timing[name]
        t[0] += 1
        t[1] += dt
        t[2] = max(t[2], dt)


def _put(dev: dict, key: str, value) -> None:
    dev["series"].setdefault(key, []).append(value)


def _recorded(name, keys, fn, handle, *args, unsupported_key=None):
    """Call ``fn(handle, *args)``; record each of ``keys(result)`` or the error."""
    dev = _dev(handle)
    try:
        out = _timed(name, fn, handle, *args)
    except _real.NVMLError as e:
        code = getattr(e, "value", None)
        if code in _NOT_THERE:
            for k in ([unsupported_key] if unsupported_key else keys(None)):
                if k not in dev["unsupported"]:
                    dev["unsupported"].append(k)
        else:
            for k in keys(None):
                _put(dev, k, {"error": code})
        raise
    for k, v in zip(keys(None), keys(out)):
        _put(dev, k, v)
    return out


# ---- set-up calls -----------------------------------------------------------------------------
def nvmlInit():
    _timed("nvmlInit", _real.nvmlInit)


def nvmlInitWithFlags(flags):
    _timed("nvmlInitWithFlags", _real.nvmlInitWithFlags, flags)


def nvmlSystemGetDriverVersion():
    v = _timed("nvmlSystemGetDriverVersion", _real.nvmlSystemGetDriverVersion)
    _facts["driver"] = v.decode() if isinstance(v, bytes) else v
    return v


def nvmlDeviceGetCount():
    return _timed("nvmlDeviceGetCount", _real.nvmlDeviceGetCount)


def nvmlDeviceGetHandleByIndex(index):
    h = _timed("nvmlDeviceGetHandleByIndex", _real.nvmlDeviceGetHandleByIndex, index)
    _index_of[_addr(h)] = index
    if index not in _devices:
        _devices[index] = {"uuid": None, "series": {}, "unsupported": [], "unknown_fields": []}
        try:
            name = _real.nvmlDeviceGetName(h)
            _facts["names"][index] = name.decode() if isinstance(name, bytes) else name
        except (_real.NVMLError, AttributeError):  # the fake has no names
            _facts["names"][index] = "unnamed"
    return h


def nvmlDeviceGetUUID(handle):
    u = _timed("nvmlDeviceGetUUID", _real.nvmlDeviceGetUUID, handle)
    _dev(handle)["uuid"] = u.decode() if isinstance(u, bytes) else u
    return u


# ---- sampled calls ----------------------------------------------------------------------------
def nvmlDeviceGetFieldValues(handle, fieldIds):
    dev = _dev(handle)
    try:
        vals = _timed("nvmlDeviceGetFieldValues", _real.nvmlDeviceGetFieldValues, handle, fieldIds)
    except _real.NVMLError as e:
        if getattr(e, "value", None) in _NOT_THERE and "field_values" not in dev["unsupported"]:
            dev["unsupported"].append("field_values")
        raise
    for fid, v in zip(fieldIds, vals):
        fid = fid[0] if isinstance(fid, tuple) else fid
        key = _KEY_OF_FIELD.get(fid)
        if key is None:
            continue
        if v.nvmlReturn == 0:
            _put(dev, key, _value(v))
        elif v.nvmlReturn == _INVALID:
            if fid not in dev["unknown_fields"]:
                dev["unknown_fields"].append(fid)
        elif v.nvmlReturn in _NOT_THERE:
            if key not in dev["unsupported"]:
                dev["unsupported"].append(key)
        else:
            _put(dev, key, {"error": v.nvmlReturn})
    return vals


def _value(v):
    t, u = v.valueType, v.value
    return {0: u.dVal, 1: u.uiVal, 2: u.ulVal, 3: u.ullVal, 4: u.sllVal, 5: u.siVal, 6: u.usVal}.get(t)


def nvmlDeviceGetPowerUsage(handle):
    return _recorded("nvmlDeviceGetPowerUsage", lambda r: ["power_usage_mw"] if r is None else [r],
                     _real.nvmlDeviceGetPowerUsage, handle)


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return _recorded("nvmlDeviceGetTotalEnergyConsumption", lambda r: ["energy_mj"] if r is None else [r],
                     _real.nvmlDeviceGetTotalEnergyConsumption, handle)


def nvmlDeviceGetTemperature(handle, sensor):
    return _recorded("nvmlDeviceGetTemperature", lambda r: ["temp_c"] if r is None else [r],
                     _real.nvmlDeviceGetTemperature, handle, sensor)


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    key = "slowdown_c" if threshold == _real.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN else "shutdown_c"
    return _recorded("nvmlDeviceGetTemperatureThreshold", lambda r: [key] if r is None else [r],
                     _real.nvmlDeviceGetTemperatureThreshold, handle, threshold)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    args = (handle,) if version is None else (handle, version)
    return _recorded("nvmlDeviceGetMemoryInfo",
                     lambda r: ["mem_used_mib", "mem_total_mib"] if r is None else
                     [round(r.used / 1048576.0), round(r.total / 1048576.0)],
                     lambda *a: _real.nvmlDeviceGetMemoryInfo(*a), *args, unsupported_key="mem_used_mib")


def nvmlDeviceGetUtilizationRates(handle):
    return _recorded("nvmlDeviceGetUtilizationRates",
                     lambda r: ["util_gpu", "util_mem"] if r is None else [r.gpu, r.memory],
                     _real.nvmlDeviceGetUtilizationRates, handle, unsupported_key="util_gpu")


def nvmlDeviceGetClockInfo(handle, type):
    key = "sm_clock" if type == _real.NVML_CLOCK_SM else "mem_clock"
    return _recorded("nvmlDeviceGetClockInfo", lambda r: [key] if r is None else [r],
                     _real.nvmlDeviceGetClockInfo, handle, type)


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return _recorded("nvmlDeviceGetEnforcedPowerLimit", lambda r: ["power_limit_mw"] if r is None else [r],
                     _real.nvmlDeviceGetEnforcedPowerLimit, handle)


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return _recorded("nvmlDeviceGetCurrentClocksEventReasons",
                     lambda r: ["clocks_event_reasons"] if r is None else [r],
                     _real.nvmlDeviceGetCurrentClocksEventReasons, handle,
                     unsupported_key="clocks_event_reasons_fn")


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    return _recorded("nvmlDeviceGetCurrentClocksThrottleReasons",
                     lambda r: ["clocks_event_reasons"] if r is None else [r],
                     _real.nvmlDeviceGetCurrentClocksThrottleReasons, handle)


def nvmlDeviceGetViolationStatus(device, perfPolicyType):
    # the same counters as fields 74 and 75 (the fake answers both from one series each)
    key = "ce_sw_power_cap_ns" if perfPolicyType == _real.NVML_PERF_POLICY_POWER else "viol_thermal_ns"
    return _recorded("nvmlDeviceGetViolationStatus", lambda r: [key] if r is None else [r.violationTime],
                     _real.nvmlDeviceGetViolationStatus, device, perfPolicyType)


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    return _recorded("nvmlDeviceGetTotalEccErrors", lambda r: ["ecc_dbe"] if r is None else [r],
                     _real.nvmlDeviceGetTotalEccErrors, handle, errorType, counterType)


def nvmlDeviceGetSamples(device, sampling_type, timeStamp):
    dev = _dev(device)
    try:
        got = _timed("nvmlDeviceGetSamples", _real.nvmlDeviceGetSamples, device, sampling_type, timeStamp)
    except _real.NVMLError as e:
        if getattr(e, "value", None) in _NOT_THERE and "power_samples" not in dev["unsupported"]:
            dev["unsupported"].append("power_samples")
        raise
    ts = sorted(s.timeStamp for s in got[1])
    _trace_gaps.extend(b - a for a, b in zip(ts, ts[1:]))
    return got


# ---- events: forwarded, with what each device supports -----------------------------------------
def nvmlDeviceGetSupportedEventTypes(handle):
    dev = _dev(handle)
    try:
        mask = _timed("nvmlDeviceGetSupportedEventTypes", _real.nvmlDeviceGetSupportedEventTypes, handle)
    except _real.NVMLError as e:
        if getattr(e, "value", None) in _NOT_THERE and "event_types" not in dev["unsupported"]:
            dev["unsupported"].append("event_types")
        raise
    dev["event_types"] = mask
    return mask


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    dev = _dev(handle)
    try:
        return _timed("nvmlDeviceRegisterEvents", _real.nvmlDeviceRegisterEvents, handle, eventTypes, eventSet)
    except _real.NVMLError as e:
        if getattr(e, "value", None) in _NOT_THERE and "register_events" not in dev["unsupported"]:
            dev["unsupported"].append("register_events")
        raise


def nvmlEventSetCreate():
    return _timed("nvmlEventSetCreate", _real.nvmlEventSetCreate)


def nvmlEventSetWait_v2(eventSet, timeoutms):
    return _timed("nvmlEventSetWait_v2", _real.nvmlEventSetWait_v2, eventSet, timeoutms)


def nvmlEventSetWait(eventSet, timeoutms):
    return _timed("nvmlEventSetWait", _real.nvmlEventSetWait, eventSet, timeoutms)


def nvmlEventSetFree(eventSet):
    return _timed("nvmlEventSetFree", _real.nvmlEventSetFree, eventSet)


# ---- the recording ------------------------------------------------------------------------------
def scenario() -> dict:
    gaps = sorted(_trace_gaps)
    return {
        "driver": _facts.get("driver"),
        "devices": [_devices[i] for i in sorted(_devices)],
        "recorded": {
            "by": "tests/monitors/record_nvml.py",
            "started_unix": _facts["started_unix"],
            "gpu_names": {str(k): v for k, v in _facts["names"].items()},
            "nvidia_ml_py": getattr(_real, "__version__", None),
            "power_sample_spacing_us": {"median": gaps[len(gaps) // 2], "min": gaps[0], "max": gaps[-1],
                                        "count": len(gaps)} if gaps else None,
            "call_timing": {name: {"calls": n, "mean_us": round(tot / n * 1e6, 1), "max_us": round(mx * 1e6, 1)}
                            for name, (n, tot, mx) in sorted(_timing.items()) if n},
        },
    }


def write() -> None:
    path = os.environ.get("HPCLAUNCH_NVML_RECORD")
    if not path or _written[0] or not _devices:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(scenario(), f, indent=1)
    os.replace(tmp, path)
    _written[0] = True


def nvmlShutdown():
    write()
    _timed("nvmlShutdown", _real.nvmlShutdown)


atexit.register(write)
