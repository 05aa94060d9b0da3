"""The daemon writes the power trace from drain_text (monitors/power_trace.py), made in the pass that
reads the driver's samples: it must be format_trace_rows(drain_rows(...)) byte for byte, and leave
each GPU's position in the driver's buffer where drain_rows leaves it."""
import types

from hypothesis import given, settings
from hypothesis import strategies as st

from hpclaunch.monitors import power_trace
from hpclaunch.monitors.logfiles import format_trace_rows
from hpclaunch.monitors.nvml_fields import VALUE_MEMBERS


class _Value:
    def __init__(self, v):
        for m in VALUE_MEMBERS:
            setattr(self, m, v)


class _Sample:
    def __init__(self, ts, v):
        self.timeStamp, self.sampleValue = ts, _Value(v)


class _Nv:
    NVML_TOTAL_POWER_SAMPLES = 0

    class NVMLError(Exception):
        pass

    def __init__(self, answers):
        self.answers = answers  # gpu index -> (vtype, [(ts, value)])

    def nvmlDeviceGetSamples(self, handle, kind, since):
        vtype, samples = self.answers[handle]
        return vtype, [_Sample(ts, v) for ts, v in samples]


def _sampler(answers, trace_ts, host, start_us):
    gpus = [types.SimpleNamespace(index=i, handle=i, off=set(), error=None, trace_ts=trace_ts[i])
            for i in sorted(answers)]
    nv = _Nv(answers)
    return types.SimpleNamespace(nv=nv, gpus=gpus, host=host, power_trace=True, start_us=start_us,
                                 _NVMLError=nv.NVMLError, _call=lambda g, cap, fn, *a: fn(*a))


_TS = st.one_of(st.integers(0, 2**62), st.integers(1_795_000_000_000_000, 1_795_000_100_000_000),
                st.integers(0, 10**7))
_VALUE = st.one_of(st.integers(0, 2**64 - 1), st.integers(0, 2_000_000),
                   st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 2e6))
_GPU = st.tuples(st.sampled_from([0, 1, 2, 3, 5, 99]), st.lists(st.tuples(_TS, _VALUE), max_size=8),
                 st.sampled_from([-1, 0, 1_795_000_050_000_000, 5_000_000]))


@settings(max_examples=400, deadline=None)
@given(st.lists(_GPU, min_size=1, max_size=3), st.sampled_from(["n1", "n.100", "a,b\nc"]),
       st.sampled_from([0, 1_795_000_050_000_000]))
def test_drain_text_is_format_trace_rows_of_drain_rows(gpus, host, start_us):
    answers = {i: (vtype, samples) for i, (vtype, samples, _) in enumerate(gpus)}
    trace_ts = {i: ts for i, (_, _, ts) in enumerate(gpus)}
    a, b = _sampler(answers, trace_ts, host, start_us), _sampler(answers, trace_ts, host, start_us)
    assert power_trace.drain_text(b) == format_trace_rows(power_trace.drain_rows(a))
    assert [g.trace_ts for g in a.gpus] == [g.trace_ts for g in b.gpus]


def test_the_first_drain_keeps_samples_from_the_monitor_start_on():
    answers = {0: (1, [(1_795_000_000_000_000, 100_000), (1_795_000_060_000_000, 200_500)])}
    s = _sampler(answers, {0: -1}, "n", 1_795_000_050_000_000)
    assert power_trace.drain_text(s) == "1795000060.0,n,0,200.5\n"
    assert s.gpus[0].trace_ts == 1_795_000_060_000_000
