"""The host source, for real (psutil on this machine)."""

import os
import time
from unittest import mock

from hpclaunch.monitors import schema
from hpclaunch.monitors.host import HostSampler

C = {c: i for i, c in enumerate(schema.HOST_COLUMNS)}


class _Energy:
    def __init__(self):
        self.v = 0

    def read(self):
        self.v += 10
        return self.v


import pytest


@pytest.mark.parametrize("fast", [True, False], ids=["proc", "psutil"])
def test_host_rows_are_real_measurements(events, fast):
    h = HostSampler("n1", events, rapl=None, cpu_temp=None, fast=fast)
    assert h.start()
    r1 = h.sample(1.0)
    # Burn CPU for several clock ticks: /proc/stat counts in jiffies (10 ms), and a burn shorter
    # than one tick rightly gives an empty cpu_pct (nothing measured), which is not what this checks.
    t_end = time.perf_counter() + 0.15
    while time.perf_counter() < t_end:
        sum(i * i for i in range(2000))
    r2 = h.sample(2.0)
    assert len(r1) == len(schema.HOST_COLUMNS)
    assert r1[C["cpu_pct"]] is None              # no previous call to compare with: empty, not 0
    assert 0.0 <= r2[C["cpu_pct"]] <= 100.0
    assert 0 < r2[C["mem_used_mib"]] < r2[C["mem_total_mib"]]
    assert r2[C["load1"]] == os.getloadavg()[0] or r2[C["load1"]] >= 0
    assert r2[C["monitor_cpu_s"]] > r1[C["monitor_cpu_s"]]
    # this process's own RSS (pytest's, whatever earlier tests imported), as psutil reads it
    import psutil
    assert abs(r2[C["monitor_rss_mib"]] - psutil.Process().memory_info().rss / 1048576) < 8
    assert r2[C["rapl_energy_uj"]] is None and r2[C["cpu_temp_c"]] is None  # sources absent here
    assert events.of("source_available")[0]["source"] == "host"
    assert events.of("source_available")[0]["via"] == ("/proc" if fast else "psutil")
    h.close()


def test_proc_fast_path_agrees_with_psutil(events):
    import psutil
    fast = HostSampler("n1", events, fast=True)
    slow = HostSampler("n1", events, fast=False)
    fast.start()
    slow.start()
    assert fast.sample(0.0)[C["cpu_pct"]] is None and slow.sample(0.0)[C["cpu_pct"]] is None
    sum(i * i for i in range(600000))
    a, b = fast.sample(1.0), slow.sample(1.0)
    assert a[C["mem_total_mib"]] == b[C["mem_total_mib"]] == psutil.virtual_memory().total / 1048576
    assert abs(a[C["mem_used_mib"]] - b[C["mem_used_mib"]]) < 64
    assert abs(a[C["monitor_rss_mib"]] - b[C["monitor_rss_mib"]]) < 8
    assert abs(a[C["cpu_pct"]] - b[C["cpu_pct"]]) < 25  # same formula, windows differ slightly
    fast.close()


def test_proc_path_absent_falls_back_to_psutil(tmp_path, events):
    h = HostSampler("n1", events, fast=True, proc_root=str(tmp_path))
    h.start()
    assert events.of("source_available")[0]["via"] == "psutil"
    r = h.sample(1.0)
    assert r[C["mem_total_mib"]] > 0


def test_host_row_takes_rapl_and_temperature_from_their_sources(events):
    class T:
        def read(self):
            return 55.0
    h = HostSampler("n1", events, rapl=_Energy(), cpu_temp=T())
    h.start()
    assert [h.sample(t)[C["rapl_energy_uj"]] for t in (1, 2)] == [10, 20]
    assert h.sample(3)[C["cpu_temp_c"]] == 55.0


# -- the line made in one piece (HostSampler.line) is the row format_rows writes -----------------
from hypothesis import given, settings
from hypothesis import strategies as st

from hpclaunch.monitors.logfiles import format_rows

_STAT = "cpu  {}\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1 2 3\nctxt 99\n"
_MEMINFO = "MemTotal:       {} kB\nMemFree:         1000 kB\nMemAvailable:   {} kB\nBuffers: 1 kB\n"


def _proc_tree(root, cpu_fields, total_kb, avail_kb, rss_pages, meminfo=None):
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(_STAT.format(" ".join(map(str, cpu_fields))))
    (root / "meminfo").write_text(meminfo or _MEMINFO.format(total_kb, avail_kb))
    (root / "self" / "statm").write_text(f"12345 {rss_pages} 300 4 0 500 0\n")


class _Const:
    def __init__(self, v):
        self.v = v

    def read(self):
        return self.v


def _pair(root, rapl=None, temp=None):
    a = HostSampler("n1,x", None, rapl=rapl, cpu_temp=temp, proc_root=str(root))
    b = HostSampler("n1,x", None, rapl=rapl, cpu_temp=temp, proc_root=str(root))
    assert a.start() and b.start() and a._proc_fds is not None
    return a, b


_cpu = st.lists(st.integers(0, 10 ** 12), min_size=8, max_size=10)


@settings(max_examples=150, deadline=None)
@given(first=_cpu, second=_cpu, total=st.integers(1, 10 ** 10), avail=st.integers(0, 10 ** 10),
       rss=st.integers(0, 10 ** 8), now=st.floats(0, 4e9), rapl=st.none() | st.integers(0, 2 ** 62),
       temp=st.none() | st.floats(-50, 150))
def test_line_is_exactly_the_formatted_row(tmp_path_factory, first, second, total, avail, rss, now, rapl,
                                           temp):
    root = tmp_path_factory.mktemp("proc")
    _proc_tree(root, first, total, avail, rss)
    a, b = _pair(root, None if rapl is None else _Const(rapl), None if temp is None else _Const(temp))
    assert a._lean  # the usual layout: line() takes the fields by position
    # load1 is the machine's own (os.getloadavg): held still, as a busy machine's moves between the two calls
    hold = mock.patch("os.getloadavg", return_value=(1.25, 1.0, 0.75))
    hold.start()
    try:
        for fields in (first, second):  # the first row has no cpu_pct, the second one compares
            (root / "stat").write_text(_STAT.format(" ".join(map(str, fields))))
            line = a.line(now)
            row = list(b.sample(now))
            row[C["monitor_cpu_s"]] = 0.0  # the process's own CPU time differs between the calls
            got = line.split(",")
            got[C["monitor_cpu_s"]] = "0.0"
            assert ",".join(got) == format_rows((row,))
    finally:
        hold.stop()
        a.close()
        b.close()


@pytest.mark.parametrize("case", ["old kernel", "meminfo reordered", "no MemAvailable", "busy 60 %"])
def test_line_matches_the_row_on_the_odd_layouts(tmp_path, case):
    cpu = [10, 0, 10, 70, 10, 0, 0, 0]
    meminfo = None
    if case == "old kernel":  # no steal, irq, softirq columns
        cpu = cpu[:5]
    elif case == "meminfo reordered":
        meminfo = "MemFree: 1 kB\nMemTotal: 2048 kB\nBuffers: 1 kB\nMemAvailable: 1024 kB\n"
    elif case == "no MemAvailable":  # before Linux 3.14
        meminfo = "MemTotal: 2048 kB\nMemFree: 1000 kB\nBuffers: 1 kB\nCached: 5 kB\n"
    _proc_tree(tmp_path, cpu, 4096, 1000, 777, meminfo)
    a, b = _pair(tmp_path)
    assert a._lean == (case == "busy 60 %")  # an odd layout: fields looked for by name
    lines = []
    for step in range(3):
        cpu = [x + (step + 1) * (3 if i == 3 else 1) for i, x in enumerate(cpu)]  # idle grows most
        (tmp_path / "stat").write_text(_STAT.format(" ".join(map(str, cpu))))
        line = a.line(7.25).split(",")
        row = list(b.sample(7.25))
        row[C["monitor_cpu_s"]] = 0.0
        line[C["monitor_cpu_s"]] = "0.0"
        assert ",".join(line) == format_rows((row,))
        lines.append(line)
    assert lines[0][C["cpu_pct"]] == "" and lines[2][C["cpu_pct"]] != ""  # first row: nothing to compare
    if case == "no MemAvailable":
        assert lines[2][C["mem_used_mib"]] == "" and lines[2][C["mem_total_mib"]] == "2.0"
    if case == "busy 60 %":
        # the last step: 6 busy fields +3 each, idle +9, iowait +3 (idle, not busy): 18 of 30
        assert lines[2][C["cpu_pct"]] == "60.0"
    a.close()
    b.close()


def test_line_leaves_positions_when_the_layout_changes_under_it(tmp_path):
    """A kernel's layout never changes, a test tree's may: the first row that does not parse by
    position is made the general way, and so is every row after it."""
    _proc_tree(tmp_path, [10, 0, 10, 70, 10, 0, 0, 0], 4096, 1000, 777)
    a, b = _pair(tmp_path)
    assert a._lean
    a.line(7.25), b.sample(7.25)
    (tmp_path / "meminfo").write_text("MemFree: 1 kB\nMemTotal: 2048 kB\nBuffers: 1 kB\nMemAvailable: 1024 kB\n")
    (tmp_path / "stat").write_text(_STAT.format("20 0 20 80 10 0 0 0"))
    line = a.line(8.25).split(",")
    row = list(b.sample(8.25))
    assert not a._lean
    row[C["monitor_cpu_s"]] = 0.0
    line[C["monitor_cpu_s"]] = "0.0"
    assert ",".join(line) == format_rows((row,))
    assert line[C["mem_total_mib"]] == "2.0" and line[C["cpu_pct"]] == "66.7"  # busy +20 of +30
    a.close()
    b.close()
