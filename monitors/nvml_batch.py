"""One GPU's ``nvmlDeviceGetFieldValues`` batch: a fixed list of field ids, asked every sample.

Through pynvml the batch costs more Python than the rest of a GPU's sample: each call builds a new
ctypes array and sets every id through a Python-level ``__setattr__`` (and a TypeError it catches,
for a plain id), and each attribute read of the answers goes through a Python-level
``__getattribute__``. With the real binding the request is built once and the C function called on
it directly (looked up through pynvml, as its own wrapper does); the answers are unpacked from the
array's memory in one pass. A binding without those parts (a fake, or a wrapper of pynvml) is
called through its public function, the answers read attribute by attribute.
"""
from __future__ import annotations

import ctypes
import struct
from typing import List, Optional, Tuple

from .nvml_fields import VALUE_MEMBERS

# nvmlFieldValue_t (fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value) as C
# lays it out, and the value union read as each of VALUE_MEMBERS' types.
_ENTRY = struct.Struct("@IIqqII8s")
_UNION = tuple(struct.Struct("@" + c) for c in "dILQqiH")


class FieldBatch:
    def __init__(self, nv, handle, fields: List[int]):
        self.nv, self.handle, self.fields = nv, handle, list(fields)
        self.args = [(f, 0) for f in self.fields]  # pairs: no TypeError per id in pynvml's wrapper
        self._array = self._lookup = None
        # The module of the binding's public function (pynvml's own, not a wrapper's such as
        # tests/monitors/record_nvml.py, whose calls must stay in its path) gives the lookup and the struct.
        scope = getattr(getattr(nv, "nvmlDeviceGetFieldValues", None), "__globals__", None) or {}
        lookup, ctype = scope.get("_nvmlGetFunctionPointer"), scope.get("c_nvmlFieldValue_t")
        if self.fields and callable(lookup) and isinstance(ctype, type) and issubclass(ctype, ctypes.Structure) \
                and ctypes.sizeof(ctype) == _ENTRY.size:
            self._lookup, self._error = lookup, scope.get("NVMLError") or nv.NVMLError
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
