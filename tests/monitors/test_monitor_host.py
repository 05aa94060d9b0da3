"""The host source, for real (psutil on this machine)."""

import os
import time

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
    assert 1 < r2[C["monitor_rss_mib"]] < 500
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
