"""A fake ``pynvml`` that replays per-GPU value series, for tests and the benchmark.

It implements the functions ``monitors/nvml.py`` calls with pynvml's signatures,
return shapes (attribute objects standing in for the ctypes structs) and exception
classes (``NVMLError`` with ``.value``, mapped to ``NVMLError_NotSupported`` etc. by
the same ``__new__`` trick as nvidia-ml-py).

A scenario is a dict ``{"devices": [device, ...], "library_missing": bool}``; a device
has ``uuid``, ``series`` ({key: list or callable(i)}), ``unsupported`` (keys that
answer NOT_SUPPORTED) and ``unknown_fields`` (field ids this device's driver is too old
to know: their nvmlFieldValue_t answers INVALID_ARGUMENT, as does any id the fake has
no series key for). Each key keeps its own call counter: call ``i`` returns
``series[min(i, len - 1)]`` (the last value is held) or ``f(i)``; an entry
``{"error": code}`` raises ``NVMLError(code)`` for that call. The default scenario is
hand-made from public ``nvidia-smi -q`` dumps of H100 80GB HBM3 boards (idle ~72 W,
700 W limit, slowdown 89 C, shutdown 92 C, 81559 MiB) - there is no GPU on the machine
this was written on, so nothing here was recorded from a live driver.

Events (``nvmlEventSetCreate`` ... ``nvmlEventSetFree``) replay XIDs at recorded times. A
device's ``xids`` is a list of ``{"after_s": s, "xid": code}`` (on a MIG GPU with
``gpu_instance_id`` and ``compute_instance_id``; else the event names the whole GPU), in time order: raised ``s`` seconds of wall
time (``time.time``, so a test may patch it) after the first ``nvmlInit`` since :func:`configure`
(the driver's event clock). As in NVML, an XID reaches only the sets the device was registered in
for ``nvmlEventTypeXidCriticalError`` when it was raised: one raised while no set was registered
is lost. Each set delivers its XIDs once each, in time order across devices, through
``nvmlEventSetWait_v2`` / ``nvmlEventSetWait`` (NVML_ERROR_TIMEOUT when nothing is due; the
fake never sleeps). A device's ``event_types`` is the mask ``nvmlDeviceGetSupportedEventTypes``
answers (default: what Hopper boards list, XIDs included); ``unsupported`` may name
``event_types`` or ``register_events`` (NOT_SUPPORTED). Scenario-wide: ``missing_functions``
names C functions the driver lacks (their binding raises FUNCTION_NOT_FOUND, as pynvml does;
``nvmlEventSetWait`` is the legacy wait, as in bindings before ``_v2``), and
``event_wait_errors`` lists ``{"after_s": s, "error": code}``: the first wait, on any set, at least
``s`` seconds after the event clock's start raises that error (once each, driver-wide).

``HPCLAUNCH_FAKE_NVML_SCENARIO`` may name a JSON file with a scenario (used by the
daemon subprocess tests), or with ``{"hosts": {NODE: scenario, ..., "default": scenario}}``: each node of a
cluster job its own (by ``$SLURMD_NODENAME``, else the host name); :func:`configure` sets one in-process. ``CALLS`` counts calls
by function name;
``FIELDS_ASKED`` lists the field ids of each ``nvmlDeviceGetFieldValues`` call (the first
FIELDS_ASKED_MAX: a daemon on the fake for hours must not grow without bound).
"""

from __future__ import annotations

import ctypes
import json
import os
import string
import sys
import time
from collections import Counter

# ---- constants (values as in nvidia-ml-py's pynvml.py) -----------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PERF_POLICY_POWER = 0
NVML_PERF_POLICY_THERMAL = 1
NVML_TOTAL_POWER_SAMPLES = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_AGGREGATE_ECC = 1
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74   # = NVML_FI_DEV_PERF_POLICY_POWER
NVML_FI_DEV_PERF_POLICY_THERMAL = 75
NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST = 76
NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271

# event types (nvml.h)
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10
_DEFAULT_EVENT_TYPES = 0x1 | 0x2 | 0x4 | 0x8 | 0x10  # assumed for an H100, not read from one
_INSTANCE_ANY = 0xFFFFFFFF

_STRINGS = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    6: "Not Found", 10: "Timeout", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error",
}


class NVMLError(Exception):
    _valClassMapping: dict = {}

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return _STRINGS.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_classes():
    mod = sys.modules[__name__]
    for name in [x for x in dir(mod) if x.startswith("NVML_ERROR_")]:
        cls_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        val = getattr(mod, name)

        def gen_new(v):
            def new(typ, *args):
                return NVMLError.__new__(typ, v)
            return new
        cls = type(cls_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = __name__
        setattr(mod, cls_name, cls)
        NVMLError._valClassMapping[val] = cls


_make_error_classes()


# ---- struct stand-ins --------------------------------------------------------------
# The stand-ins are built for every call, as pynvml builds its ctypes structs: each is one
# plain __init__, so that the fake's own cost does not swamp the sampler's in the benchmark.
class _Value:
    __slots__ = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")

    def __init__(self, v=0):
        if type(v) is float:
            self.dVal = v
            self.uiVal = self.ulVal = self.ullVal = self.sllVal = self.siVal = self.usVal = 0
        else:
            self.dVal = self.usVal = 0
            self.uiVal = self.ulVal = self.ullVal = self.sllVal = self.siVal = int(v)


class _Field:
    __slots__ = ("fieldId", "scopeId", "timestamp", "latencyUsec", "valueType", "nvmlReturn", "value")

    def __init__(self, fid, timestamp, value_type, ret, value):
        self.fieldId, self.scopeId = (fid if isinstance(fid, tuple) else (fid, 0))
        self.timestamp = timestamp
        self.latencyUsec = 0
        self.valueType = value_type
        self.nvmlReturn = ret
        self.value = value


class _Sample:  # nvmlSample_t
    __slots__ = ("timeStamp", "sampleValue")

    def __init__(self, ts, value):
        self.timeStamp = ts
        self.sampleValue = value


class _Struct:
    def __init__(self, **kw):
        self.__dict__.update(kw)


_DEVICES = {}  # index -> buffer standing in for the driver's device record


class _Handle(ctypes.c_void_p):
    """An nvmlDevice_t: a pointer to the driver's record of the device. Like pynvml, the fake
    hands out a new pointer object each time (here also in event data), to the same address."""

    def __init__(self, index):
        super().__init__(ctypes.addressof(_DEVICES.setdefault(index, ctypes.create_string_buffer(8))))
        self.index = index

    def __repr__(self):
        return f"<fake nvmlDevice {self.index}>"


# ---- scenarios ---------------------------------------------------------------------
def _h100(uuid, seed=0, **over):
    """An H100 SXM going from idle to load: 100 ms power samples, counters rising."""
    def power(i):
        return 72000 + min(i, 10) * 60000 + (i * 7919 + seed) % 5000   # mW
    series = {
        "power_instant_mw": power,
        "power_average_mw": lambda i: power(i) - 1500,
        "power_usage_mw": lambda i: power(i) - 1500,
        "energy_mj": lambda i: 1_234_567_000 + i * (72000 + min(i, 10) * 60000) // 1000 * 1000,
        "temp_c": lambda i: 31 + min(i, 20),
        "mem_temp_c": lambda i: 40 + min(i, 20),
        "mem_used_mib": lambda i: 1 + min(i, 5) * 12000,
        "mem_total_mib": [81559],
        "util_gpu": lambda i: 0 if i == 0 else 97,
        "util_mem": lambda i: 0 if i == 0 else 41,
        "sm_clock": lambda i: 1980,
        "mem_clock": [2619],
        "power_limit_mw": [700000],
        "clocks_event_reasons": lambda i: 0x1 if i == 0 else 0x0,
        # nvmlDeviceGetViolationStatus(POWER) is field 74's counter (ce_sw_power_cap_ns) and
        # THERMAL field 75's: one counter each, as an H100 answered (tests/monitors/recorded/)
        "viol_thermal_ns": [0],
        # per-reason cumulative clocks-event time, ns (field values 74, 76, 269-271)
        "ce_sw_power_cap_ns": [0],
        "ce_sync_boost_ns": [0],
        "ce_sw_thermal_ns": [0],
        "ce_hw_thermal_ns": [0],
        "ce_hw_power_brake_ns": [0],
        "ecc_dbe": [0],
        "slowdown_c": [89],
        "shutdown_c": [92],
    }
    series.update(over.pop("series", {}))
    return {"uuid": uuid, "series": series, "unsupported": over.pop("unsupported", []), **over}


def default_scenario():
    return {"driver": "550.54.15", "devices": [
        _h100("GPU-0f1e2d3c-0000-4000-8000-000000000000", 0),
        _h100("GPU-0f1e2d3c-0000-4000-8000-000000000001", 1),
    ]}


_scenario = None
_counters: Counter = Counter()
CALLS: Counter = Counter()
FIELDS_ASKED: list = []  # (device index, field ids) of each nvmlDeviceGetFieldValues call
FIELDS_ASKED_MAX = 10_000
_initialised = False
_event_t0 = None          # the event clock's start: the first nvmlInit since configure
_event_errors_raised: set = set()


def configure(scenario=None):
    """Install ``scenario`` (None: the default) and reset all counters."""
    global _scenario, _event_t0
    _scenario = scenario if scenario is not None else default_scenario()
    _event_t0 = None
    _event_errors_raised.clear()
    _counters.clear()
    CALLS.clear()
    FIELDS_ASKED.clear()


def _load():
    global _scenario
    if _scenario is None:
        path = os.environ.get("HPCLAUNCH_FAKE_NVML_SCENARIO")
        if path:
            with open(path) as f:
                _scenario = json.load(f)
            if "hosts" in _scenario:  # one scenario per node of a cluster job, by the node's name
                host = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
                _scenario = _scenario["hosts"].get(host) or _scenario["hosts"]["default"]
        else:
            _scenario = default_scenario()
    return _scenario


def _dev(handle):
    return _load()["devices"][handle.index]


def _next(handle, key, advance=True):
    d = _load()["devices"][handle.index]
    if key in d.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    s = d["series"][key]
    ck = (handle.index, key)
    i = _counters[ck]
    if advance:
        _counters[ck] = i + 1
    v = s(i) if callable(s) else s[i if i < len(s) else -1]
    if type(v) is dict and "error" in v:
        raise NVMLError(v["error"])
    return v


def _count(name):
    CALLS[name] += 1
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)


# ---- the API -----------------------------------------------------------------------
def nvmlInit():
    global _initialised, _event_t0
    CALLS["nvmlInit"] += 1
    if _load().get("library_missing"):
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    _initialised = True
    if _event_t0 is None:
        _event_t0 = time.time()


def nvmlInitWithFlags(flags):
    nvmlInit()


def nvmlShutdown():
    global _initialised
    CALLS["nvmlShutdown"] += 1
    if not _initialised:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _initialised = False


def nvmlSystemGetDriverVersion():
    _count("nvmlSystemGetDriverVersion")
    return _load().get("driver", "550.54.15")


def nvmlDeviceGetCount():
    _count("nvmlDeviceGetCount")
    return len(_load()["devices"])


def nvmlDeviceGetHandleByIndex(index):
    _count("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(_load()["devices"]):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def nvmlDeviceGetUUID(handle):
    _count("nvmlDeviceGetUUID")
    return _dev(handle)["uuid"]


_FIELD_KEYS = {NVML_FI_DEV_POWER_INSTANT: "power_instant_mw", NVML_FI_DEV_POWER_AVERAGE: "power_average_mw",
               NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: "energy_mj", NVML_FI_DEV_MEMORY_TEMP: "mem_temp_c",
               NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: "ce_sw_power_cap_ns",
               NVML_FI_DEV_PERF_POLICY_THERMAL: "viol_thermal_ns",
               NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: "ce_sync_boost_ns",
               NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: "ce_sw_thermal_ns",
               NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: "ce_hw_thermal_ns",
               NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: "ce_hw_power_brake_ns"}
_ULL_KEYS = {"energy_mj", "viol_thermal_ns", "ce_sw_power_cap_ns", "ce_sync_boost_ns", "ce_sw_thermal_ns", "ce_hw_thermal_ns",
             "ce_hw_power_brake_ns"}


def nvmlDeviceGetFieldValues(handle, fieldIds):
    _count("nvmlDeviceGetFieldValues")
    if len(FIELDS_ASKED) < FIELDS_ASKED_MAX:
        FIELDS_ASKED.append((handle.index, tuple(f[0] if isinstance(f, tuple) else f for f in fieldIds)))
    d = _dev(handle)
    if "field_values" in d.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    out = []
    now_us = int(time.time() * 1e6)
    unknown = d.get("unknown_fields", ())
    series, unsupported = d["series"], d.get("unsupported", ())
    for fid in fieldIds:
        fid_only = fid[0] if isinstance(fid, tuple) else fid
        key = None if fid_only in unknown else _FIELD_KEYS.get(fid_only)
        if key not in series and key not in unsupported:
            key = None  # a scenario without the series: a driver that does not know the field
        vtype = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG if key in _ULL_KEYS else NVML_VALUE_TYPE_UNSIGNED_INT
        if key is None:
            out.append(_Field(fid, now_us, vtype, NVML_ERROR_INVALID_ARGUMENT, _Value(0)))
            continue
        try:
            out.append(_Field(fid, now_us, vtype, NVML_SUCCESS, _Value(_next(handle, key))))
        except NVMLError as e:
            out.append(_Field(fid, now_us, vtype, e.value, _Value(0)))
    return out


def nvmlDeviceGetPowerUsage(handle):
    _count("nvmlDeviceGetPowerUsage")
    return _next(handle, "power_usage_mw")


def nvmlDeviceGetTotalEnergyConsumption(handle):
    _count("nvmlDeviceGetTotalEnergyConsumption")
    return _next(handle, "energy_mj")


def nvmlDeviceGetTemperature(handle, sensor):
    _count("nvmlDeviceGetTemperature")
    return _next(handle, "temp_c")


def nvmlDeviceGetTemperatureThreshold(handle, threshold):
    _count("nvmlDeviceGetTemperatureThreshold")
    key = "slowdown_c" if threshold == NVML_TEMPERATURE_THRESHOLD_SLOWDOWN else "shutdown_c"
    return _next(handle, key)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    _count("nvmlDeviceGetMemoryInfo")
    used = _next(handle, "mem_used_mib")
    total = _next(handle, "mem_total_mib")
    return _Struct(total=total * 1048576, used=used * 1048576, free=(total - used) * 1048576)


def nvmlDeviceGetUtilizationRates(handle):
    _count("nvmlDeviceGetUtilizationRates")
    return _Struct(gpu=_next(handle, "util_gpu"), memory=_next(handle, "util_mem"))


def nvmlDeviceGetClockInfo(handle, type):
    _count("nvmlDeviceGetClockInfo")
    return _next(handle, "sm_clock" if type == NVML_CLOCK_SM else "mem_clock")


def nvmlDeviceGetEnforcedPowerLimit(handle):
    _count("nvmlDeviceGetEnforcedPowerLimit")
    return _next(handle, "power_limit_mw")


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    _count("nvmlDeviceGetCurrentClocksEventReasons")
    if "clocks_event_reasons_fn" in _dev(handle).get("unsupported", ()):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    return _next(handle, "clocks_event_reasons")


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    _count("nvmlDeviceGetCurrentClocksThrottleReasons")
    return _next(handle, "clocks_event_reasons")


def nvmlDeviceGetViolationStatus(device, perfPolicyType):
    _count("nvmlDeviceGetViolationStatus")
    key = "viol_thermal_ns"
    if perfPolicyType == NVML_PERF_POLICY_POWER:  # field 74's counter; a scenario of a driver that
        series = _dev(device)["series"]           # predates the field may give it as viol_power_ns
        key = "ce_sw_power_cap_ns" if "ce_sw_power_cap_ns" in series or "viol_power_ns" not in series \
            else "viol_power_ns"
    return _Struct(referenceTime=int(time.time() * 1e6), violationTime=_next(device, key))


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    _count("nvmlDeviceGetTotalEccErrors")
    return _next(handle, "ecc_dbe")


def nvmlDeviceGetSamples(device, sampling_type, timeStamp):
    """Power samples every 100 ms of wall time, as the driver's ring buffer holds them."""
    _count("nvmlDeviceGetSamples")
    d = _dev(device)
    if "power_samples" in d.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    now = int(time.time() * 10) * 100_000  # last 100 ms boundary, µs
    start = max(timeStamp, now - 2_000_000)  # the buffer holds the last 2 s here
    first = (start // 100_000 + 1) * 100_000
    ts = list(range(first, now + 1, 100_000))
    if not ts:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    mw = int(_next(device, "power_instant_mw", advance=False))
    return (NVML_VALUE_TYPE_UNSIGNED_INT, [_Sample(t, _Value(mw + (t // 100_000) % 7 * 100)) for t in ts])


# ---- events -----------------------------------------------------------------------
class _EventSet:
    def __init__(self):
        self.created = time.time()
        self.registered = []   # [handle, types, time registered, XIDs delivered or lost before it]
        self.freed = False


def _c_function(name):
    """pynvml looks the C function up at call time: FUNCTION_NOT_FOUND where the driver lacks it."""
    _count(name)
    if name in _load().get("missing_functions", ()):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)


def nvmlEventSetCreate():
    _c_function("nvmlEventSetCreate")
    return _EventSet()


def nvmlDeviceGetSupportedEventTypes(handle):
    _c_function("nvmlDeviceGetSupportedEventTypes")
    d = _dev(handle)
    if "event_types" in d.get("unsupported", ()):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return d.get("event_types", _DEFAULT_EVENT_TYPES)


def nvmlDeviceRegisterEvents(handle, eventTypes, eventSet):
    _c_function("nvmlDeviceRegisterEvents")
    d = _dev(handle)
    if "register_events" in d.get("unsupported", ()) or eventTypes & ~d.get("event_types", _DEFAULT_EVENT_TYPES):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)  # none of the types is registered then
    now = time.time()
    xids = d.get("xids", []) if eventTypes & nvmlEventTypeXidCriticalError else []
    lost = sum(1 for x in xids if _event_t0 + x["after_s"] < now)  # raised before: not this set's
    eventSet.registered.append([handle, eventTypes, now, lost])


def _wait(eventSet):
    if eventSet.freed:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    now = time.time()
    for i, e in enumerate(_load().get("event_wait_errors", ())):
        if i not in _event_errors_raised and _event_t0 + e["after_s"] <= now:
            _event_errors_raised.add(i)
            raise NVMLError(e["error"])
    due = []
    for reg in eventSet.registered:
        handle, types, t_reg, done = reg
        xids = _dev(handle).get("xids", []) if types & nvmlEventTypeXidCriticalError else []
        if done < len(xids) and _event_t0 + xids[done]["after_s"] <= now:
            due.append((_event_t0 + xids[done]["after_s"], handle.index, reg, xids[done]))
    if not due:
        raise NVMLError(NVML_ERROR_TIMEOUT)
    _, _, reg, xid = min(due, key=lambda x: x[:2])
    reg[3] += 1
    return _Struct(device=_Handle(reg[0].index), eventType=nvmlEventTypeXidCriticalError, eventData=xid["xid"],
                   gpuInstanceId=xid.get("gpu_instance_id", _INSTANCE_ANY),
                   computeInstanceId=xid.get("compute_instance_id", _INSTANCE_ANY))


def nvmlEventSetWait_v2(eventSet, timeoutms):
    _c_function("nvmlEventSetWait_v2")
    return _wait(eventSet)


def nvmlEventSetWait(eventSet, timeoutms):
    _c_function("nvmlEventSetWait")
    return _wait(eventSet)


def nvmlEventSetFree(eventSet):
    _c_function("nvmlEventSetFree")
    eventSet.freed = True


def nvmlDeviceGetComputeRunningProcesses(handle):  # present so a test can see it is never called
    _count("nvmlDeviceGetComputeRunningProcesses")
    return []
