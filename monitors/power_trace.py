"""The driver's buffered power samples (``nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)``), drained
each interval into ``<host>.power_trace.csv`` rows ``(time_unix, host, gpu_index, power_w)`` in time
order (docs/monitor-logs.md). ``sampler`` is the NvmlSampler whose GPUs are drained."""

from __future__ import annotations

import operator
from typing import List

_TIME_AND_GPU = operator.itemgetter(0, 2)  # the power trace's order


def drain(sampler) -> List[tuple]:
    """Rows for the power trace: the driver's buffered power samples since the last call.

    The first call of each GPU asks for the whole buffer and keeps the samples
    from the monitor's start on (when the timestamps are epoch microseconds).
    """
    if not sampler.power_trace:
        return []
    rows = []
    for g in sampler.gpus:
        if "power_samples" in g.off or g.error is not None:
            continue
        first = g.trace_ts < 0
        try:
            samples = sampler._call(g, "power_samples", g.samples.read, 0 if first else g.trace_ts)
        except sampler._NVMLError:
            continue  # NOT_FOUND = nothing new; other errors show in the GPU's row
        if not samples:  # [(time stamp us, mW)]; none for a value type NVML has not defined
            continue
        floor = 0 if first else g.trace_ts
        if first and samples and max(ts for ts, _ in samples) > 1e15:
            floor = sampler.start_us
        last = floor if first else g.trace_ts
        keep_all = first and floor == 0
        host, index, add = sampler.host, g.index, rows.append
        for ts, mw in samples:  # tens a second per GPU on a real driver: kept lean
            if ts <= floor and not keep_all:
                continue
            add((ts / 1e6, host, index, mw / 1000.0))
            if ts > last:
                last = ts
        g.trace_ts = last
    rows.sort(key=_TIME_AND_GPU)
    return rows
