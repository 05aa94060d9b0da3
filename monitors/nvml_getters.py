"""A GPU's per-sample NVML getters, each a call without arguments.

pynvml's getter wrappers build their ctypes arguments and result at every call and check the
return through one more function; two of them (memory, utilisation) answer a structure whose every
attribute read is a Python-level ``__getattribute__``. A GPU's sample calls seven of them. With
pynvml itself each getter here keeps its arguments and result and calls the C function as the
wrapper does (looked up through pynvml by name at each call, so a function the driver lacks raises
FUNCTION_NOT_FOUND as it does there) and answers the same value: an int, or a structure with the
same fields (the same object at each call: read it before the next). With any other binding (a
fake, a wrapper of pynvml) a getter is the public function with the GPU's arguments bound.
"""
from __future__ import annotations

import ctypes
import functools

from .nvml_batch import direct


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


# getter -> (pynvml function, also the C function's name; its constant arguments; the C result)
GETTERS = {
    "temperature": ("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",), ctypes.c_uint),
    "memory": ("nvmlDeviceGetMemoryInfo", (), Memory),
    "utilization": ("nvmlDeviceGetUtilizationRates", (), Utilization),
    "sm_clock": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",), ctypes.c_uint),
    "mem_clock": ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",), ctypes.c_uint),
    "power_limit": ("nvmlDeviceGetEnforcedPowerLimit", (), ctypes.c_uint),
    "clocks_event_reasons": ("nvmlDeviceGetCurrentClocksEventReasons", (), ctypes.c_ulonglong),
    "throttle_reasons": ("nvmlDeviceGetCurrentClocksThrottleReasons", (), ctypes.c_ulonglong),
    "power_usage": ("nvmlDeviceGetPowerUsage", (), ctypes.c_uint),
    "energy_counter": ("nvmlDeviceGetTotalEnergyConsumption", (), ctypes.c_ulonglong),
}


class Getters:
    __slots__ = tuple(GETTERS)

    def __init__(self, nv, handle):
        for name, (public, consts, result) in GETTERS.items():
            setattr(self, name, _getter(nv, handle, public, consts, result))


def _absent(public: str):
    raise AttributeError(f"{public} not offered by this NVML binding")


def _getter(nv, handle, public: str, consts, result):
    fn = getattr(nv, public, None)
    if fn is None:  # an old binding: the sampler says the capability is missing, once
        return functools.partial(_absent, public)
    args = [getattr(nv, c) for c in consts]
    found = direct(nv, public)
    if found is None:
        return functools.partial(fn, handle, *args)
    lookup, error, _ = found
    out = result()
    cargs = (handle, *(ctypes.c_uint(a) for a in args), ctypes.byref(out))  # enums are C unsigned ints
    if issubclass(result, ctypes.Structure):
        def call():
            ret = lookup(public)(*cargs)
            if ret:
                raise error(ret)
            return out
    else:
        def call():
            ret = lookup(public)(*cargs)
            if ret:
                raise error(ret)
            return out.value
    return call
