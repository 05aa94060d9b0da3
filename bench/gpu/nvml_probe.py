#!/usr/bin/env python3
"""Two cheaper ways to read what the monitor reads, tried on a real driver.

    python bench/gpu/nvml_probe.py [--calls 30]

1. The power-sample drain (``nvmlDeviceGetSamples``, ~0.7 ms a call on an H100): pynvml and the
   monitor ask the count first (a NULL array), then the samples: two calls. Timed here: the count
   query alone, the two calls, and one call into an array kept large enough; the one call's samples
   checked against the two calls'; and what the driver answers when the array is too small.
2. The energy counter: field 83 (TOTAL_ENERGY_CONSUMPTION, ~3.5 ms) against field 191
   (NVML_FI_DEV_ENERGY, scope GPU), cost and value side by side.

Every call is timed cold (20 ms apart), CPU medians. Needs a GPU (or the tests' fake library).
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time

from nvml_direct import cpu_us  # this folder: the same cold-call timer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=30)
    a = ap.parse_args(argv)
    import pynvml as nv
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    fn = nv._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    kind, vtype, count = ctypes.c_uint(0), ctypes.c_uint(), ctypes.c_uint()
    big = (nv.c_nvmlSample_t * 1024)()

    def since_1s():
        return ctypes.c_ulonglong(int((time.time() - 1) * 1e6))

    def count_only():
        count.value = 0
        return fn(h, kind, since_1s(), ctypes.byref(vtype), ctypes.byref(count), None), count.value

    def two_calls():
        ts = since_1s()
        count.value = 0
        ret = fn(h, kind, ts, ctypes.byref(vtype), ctypes.byref(count), None)
        if ret:
            return ret, []
        arr = (nv.c_nvmlSample_t * count.value)()
        ret = fn(h, kind, ts, ctypes.byref(vtype), ctypes.byref(count), arr)
        return ret, [(arr[i].timeStamp, arr[i].sampleValue.uiVal) for i in range(count.value)]

    def one_call(cap=1024, ts=None):
        count.value = cap
        ret = fn(h, kind, ts if ts is not None else since_1s(), ctypes.byref(vtype), ctypes.byref(count), big)
        return ret, [(big[i].timeStamp, big[i].sampleValue.uiVal) for i in range(min(count.value, cap))]

    print("1. power samples since 1 s ago")
    time.sleep(1.5)
    r_count = count_only()
    r_two = two_calls()
    r_one = one_call()
    print(f"   count query: return {r_count[0]}, count {r_count[1]}")
    print(f"   two calls: return {r_two[0]}, {len(r_two[1])} samples; one call: return {r_one[0]}, "
          f"{len(r_one[1])} samples")
    two, one = dict(r_two[1]), dict(r_one[1])
    common = set(two) & set(one)
    print(f"   in both {len(common)}, values differing {sum(two[t] != one[t] for t in common)}, "
          f"only in two calls {len(set(two) - set(one))} (older than the one call's first: "
          f"{sum(t < min(one) for t in set(two) - set(one)) if one else '-'}), only in one call {len(set(one) - set(two))}")
    order = [t for t, _ in r_one[1]]
    print(f"   one call's order: {'ascending' if order == sorted(order) else 'not ascending'}")
    for cap in (4, 1):
        ts = since_1s()
        ret, got = one_call(cap, ts)
        print(f"   array of {cap} for ~1 s of samples: return {ret} ({nv.nvmlErrorString(ret) if ret else 'success'}), "
              f"count set to {count.value}, time stamps {[t for t, _ in got]}")
        ret0, full = one_call(1024, ts)
        if got and full:
            ft = [t for t, _ in full]
            print(f"     the full answer has {len(full)}: the small array's are its "
                  f"{'first' if got[0][0] == ft[0] else 'last' if got[-1][0] == ft[-1] else 'other'} ones")
    c_count = cpu_us(count_only, a.calls)
    c_two = cpu_us(two_calls, a.calls)
    c_one = cpu_us(one_call, a.calls)
    print(f"   CPU per call: count query {c_count:.1f} µs, two calls {c_two:.1f} µs, one call {c_one:.1f} µs")

    print("\n2. energy: field 83 against field 191 (scope 0, GPU)")
    for fids in ([83], [(191, 0)], [83, (191, 0)], [186, 185, 82, 74, 76, 269], [186, 185, 82, 74, 76, 269, (191, 0)]):
        vals = nv.nvmlDeviceGetFieldValues(h, fids)
        shown = [(v.fieldId, v.nvmlReturn, v.valueType, v.value.ullVal if not v.nvmlReturn else None) for v in vals]
        print(f"   {str(fids):44s} {cpu_us(lambda f=fids: nv.nvmlDeviceGetFieldValues(h, f), a.calls):9.1f} µs  {shown}")
    nv.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
