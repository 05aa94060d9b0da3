"""The driver's buffered power samples (``nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)``), drained
each interval into ``<host>.power_trace.csv`` rows ``(time_unix, host, gpu_index, power_w)`` in time
order (docs/monitor-logs.md).

Tens of samples a second per GPU on a real driver: the daemon takes them as CSV text made in the
same pass that reads them (:func:`drain_text`), the very text ``format_trace_rows(drain_rows(...))``
would write, without the row tuples in between (issue 20: the trace was as costly as the GPU rows).
"""

from __future__ import annotations

import operator
from typing import List

from .logfiles import cell, float_cell
from .nvml_fields import VALUE_MEMBERS

# A power sample's value by its nvmlValueType_t (the union member VALUE_MEMBERS names), as one C call.
_SAMPLE_VALUE = tuple(operator.attrgetter("sampleValue." + m) for m in VALUE_MEMBERS)
_TIME_AND_GPU = operator.itemgetter(0, 2)  # the power trace's order
_TIME_AND_GPU_TEXT = operator.itemgetter(0, 1)


def _fresh(sampler, g):
    """(samples, lo, value getter) of one GPU: the samples with ``timeStamp > lo`` are new.

    The first call of each GPU asks for the whole buffer and keeps the samples from the monitor's
    start on (when the timestamps are epoch microseconds); later calls, those after the last one
    seen. None: nothing to read (the capability is off, the GPU is in error, nothing new, or a value
    type NVML has not defined).
    """
    if "power_samples" in g.off or g.error is not None:
        return None
    nv = sampler.nv
    first = g.trace_ts < 0
    try:
        got = sampler._call(g, "power_samples", nv.nvmlDeviceGetSamples, g.handle,
                            nv.NVML_TOTAL_POWER_SAMPLES, 0 if first else g.trace_ts)
    except sampler._NVMLError:
        return None  # NOT_FOUND = nothing new; other errors show in the GPU's row
    if not got:
        return None
    vtype, samples = got
    if not samples:
        return None
    newest = max(s.timeStamp for s in samples)
    floor = 0 if first else g.trace_ts
    if first and newest > 1e15:
        floor = sampler.start_us
    if not 0 <= vtype < len(_SAMPLE_VALUE):  # a type NVML has not defined: none kept
        g.trace_ts = floor
        return None
    g.trace_ts = max(floor, newest)
    # the first read with timestamps that are not epoch µs keeps all (they are all >= 0)
    return samples, (-1 if first and floor == 0 else floor), _SAMPLE_VALUE[vtype]


def drain_rows(sampler) -> List[tuple]:
    """The new samples of every GPU as rows ``(time s, host, gpu index, watts)``, in time order."""
    rows: List[tuple] = []
    if not sampler.power_trace:
        return rows
    host = sampler.host
    for g in sampler.gpus:
        got = _fresh(sampler, g)
        if got is not None:
            samples, lo, value, index = *got, g.index
            rows += [(s.timeStamp / 1e6, host, index, value(s) / 1000.0) for s in samples if s.timeStamp > lo]
    rows.sort(key=_TIME_AND_GPU)
    return rows


def drain_text(sampler) -> str:
    """``format_trace_rows(drain_rows(sampler))``, made in one pass (tests hold the two equal)."""
    if not sampler.power_trace:
        return ""
    lines: List[tuple] = []
    add = lines.append
    fl = float_cell
    host = cell(sampler.host)
    for g in sampler.gpus:
        got = _fresh(sampler, g)
        if got is None:
            continue
        samples, lo, value = got
        index = g.index
        mid = f",{host},{index},"
        for s in samples:
            ts = s.timeStamp
            if ts > lo:
                add((ts, index, fl(ts / 1e6) + mid + fl(value(s) / 1000.0) + "\n"))
    if not lines:
        return ""
    lines.sort(key=_TIME_AND_GPU_TEXT)
    return "".join([line for _, _, line in lines])
