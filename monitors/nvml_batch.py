"""The two NVML reads that answer arrays, asked every sample for each GPU: the field-value batch
(``nvmlDeviceGetFieldValues``, a fixed list of field ids) and the driver's buffered power samples
(``nvmlDeviceGetSamples``).

Through pynvml they cost more Python than the rest of a GPU's sample: each call builds new ctypes
arrays (the samples copied into a list of new structures), sets every field id through a Python-level
``__setattr__`` (and a TypeError it catches, for a plain id), and each attribute read of the answers
goes through a Python-level ``__getattribute__``. With the real binding the requests are kept and the
C functions called directly (looked up by name at each call through pynvml, as its own wrappers do);
the answers are unpacked from the arrays' memory in one pass. A binding without those parts (a fake,
or a wrapper of pynvml) is called through its public functions, the answers read attribute by
attribute.
"""
from __future__ import annotations

import ctypes
import operator
import struct
from typing import List, Optional, Tuple

from .nvml_fields import VALUE_MEMBERS

# nvmlFieldValue_t (fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value) as C
# lays it out, and the value union read as each of VALUE_MEMBERS' types.
_ENTRY = struct.Struct("@IIqqII8s")
_UNION = tuple(struct.Struct("@" + c) for c in "dILQqiH")
# nvmlSample_t (timeStamp, value) with the union read as each type (every member starts at offset 8).
_SAMPLE = tuple(struct.Struct("@Q" + c + "x" * (8 - struct.calcsize(c))) for c in "dILQqiH")
# A power sample's value as the binding's structure holds it, by value type.
_SAMPLE_VALUE = tuple(operator.attrgetter("sampleValue." + m) for m in VALUE_MEMBERS)


def pynvml_scope(nv, public: str) -> dict:
    """The globals of the module the binding's ``public`` function is defined in: pynvml's own
    (its C lookup and structures) when the binding is pynvml; a wrapper's (tests/monitors/
    record_nvml.py), whose calls must stay in its path, has none of them."""
    return getattr(getattr(nv, public, None), "__globals__", None) or {}


def direct(nv, public: str):
    """``(C lookup, NVMLError, scope)`` when the binding's ``public`` function is pynvml's own, whose
    module looks C functions up by name (``_nvmlGetFunctionPointer``); None for any other binding,
    which is called through its public functions."""
    scope = pynvml_scope(nv, public)
    lookup = scope.get("_nvmlGetFunctionPointer")
    if not callable(lookup):
        return None
    return lookup, scope.get("NVMLError") or nv.NVMLError, scope


def _struct(scope: dict, name: str, size: int):
    t = scope.get(name)
    return t if isinstance(t, type) and issubclass(t, ctypes.Structure) and ctypes.sizeof(t) == size else None


class FieldBatch:
    """One GPU's ``nvmlDeviceGetFieldValues`` request for a fixed list of field ids."""

    def __init__(self, nv, handle, fields: List[int]):
        self.nv, self.handle, self.fields = nv, handle, list(fields)
        self.args = [(f, 0) for f in self.fields]  # pairs: no TypeError per id in pynvml's wrapper
        self._array = None
        found = direct(nv, "nvmlDeviceGetFieldValues")
        ctype = found and _struct(found[2], "c_nvmlFieldValue_t", _ENTRY.size)
        if self.fields and ctype is not None:
            self._lookup, self._error, _ = found
            blank = b"".join(_ENTRY.pack(f, 0, 0, 0, 0, 0, b"") for f in self.fields)
            self._array = (ctype * len(self.fields)).from_buffer_copy(blank)
            self._blank = blank
            self._count = ctypes.c_int32(len(self.fields))
            self._ref = ctypes.byref(self._array)

    def read(self) -> List[Tuple[int, Optional[object]]]:
        """``(nvmlReturn, value or None)`` per field id; the call's own failure raises the
        binding's NVMLError, as its public function does."""
        nv = self.nv
        if self._array is None:
            return results(nv.nvmlDeviceGetFieldValues(self.handle, self.args))
        ctypes.memmove(self._array, self._blank, len(self._blank))  # no answer of the last call survives
        ret = self._lookup("nvmlDeviceGetFieldValues")(self.handle, self._count, self._ref)
        if ret:
            raise self._error(ret)
        return results(self._array)


def results(vals) -> List[Tuple[int, Optional[object]]]:
    """``(nvmlReturn, value or None)`` for each nvmlFieldValue_t of an answer."""
    if isinstance(vals, ctypes.Array) and ctypes.sizeof(vals._type_) == _ENTRY.size:
        union = _UNION
        return [(ret, union[vt].unpack_from(raw)[0] if not ret and vt < 7 else None)
                for _f, _s, _t, _l, vt, ret, raw in _ENTRY.iter_unpack(bytes(vals))]
    out = []
    for v in vals:  # a binding of Python objects (tests/monitors/fake_nvml.py)
        ret, vt = v.nvmlReturn, v.valueType
        out.append((ret, getattr(v.value, VALUE_MEMBERS[vt]) if not ret and 0 <= vt < len(VALUE_MEMBERS) else None))
    return out


class PowerSamples:
    """A GPU's buffered power samples newer than a time stamp (``nvmlDeviceGetSamples`` with
    NVML_TOTAL_POWER_SAMPLES): tens a second per GPU on a real driver."""

    def __init__(self, nv, handle):
        self.nv, self.handle, self._lookup = nv, handle, None
        found = direct(nv, "nvmlDeviceGetSamples")
        self._type = found and _struct(found[2], "c_nvmlSample_t", 16)
        if self._type is None:
            return
        self._lookup, self._error, _ = found
        self._kind = ctypes.c_uint(0)  # NVML_TOTAL_POWER_SAMPLES
        self._vtype, self._count = ctypes.c_uint(), ctypes.c_uint()
        self._refs = (ctypes.byref(self._vtype), ctypes.byref(self._count))
        self._array, self._cap = None, 0

    def read(self, since: int) -> List[Tuple[int, object]]:
        """``[(time stamp in us, value)]`` in the driver's order, none for a value type NVML has not
        defined; the binding's NVMLError as its public function raises it (NOT_FOUND: nothing newer)."""
        if self._lookup is None:
            nv = self.nv
            vtype, samples = nv.nvmlDeviceGetSamples(self.handle, nv.NVML_TOTAL_POWER_SAMPLES, since)
            value = _SAMPLE_VALUE[vtype] if 0 <= vtype < len(_SAMPLE_VALUE) else None
            return [(s.timeStamp, value(s)) for s in samples] if value is not None else []
        fn = self._lookup("nvmlDeviceGetSamples")
        ts = ctypes.c_ulonglong(since)
        self._count.value = 0
        ret = fn(self.handle, self._kind, ts, *self._refs, None)  # the count first, as pynvml asks
        if ret:
            raise self._error(ret)
        if self._count.value > self._cap:
            self._cap = self._count.value
            self._array = (self._type * self._cap)()
        self._count.value = self._cap
        ret = fn(self.handle, self._kind, ts, *self._refs, self._array)
        if ret:
            raise self._error(ret)
        vtype, n = self._vtype.value, min(self._count.value, self._cap)
        if vtype >= len(_SAMPLE) or n == 0:
            return []
        return list(_SAMPLE[vtype].iter_unpack(ctypes.string_at(self._array, n * 16)))
