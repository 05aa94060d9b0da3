"""bench/monitor's whole-daemon section (bench/monitor/daemons.py: the figures in docs/benchmarks.md)
keeps working."""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench", "monitor", "daemons.py")


def test_daemon_section_reports_the_daemons_own_figures():
    spec = importlib.util.spec_from_file_location("bench_monitor_daemons", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    libdir, why = bench.build_libnvml()
    assert libdir, why
    res = bench.daemon_runs(1.5, [0, 2], interval=0.5, libnvml=libdir)
    floors = {("floor", m) for m in ("wake", "host", "row", "c-wake", "c-host")}  # floor.py's, floor.c's
    assert set(res) == {0, 2, (bench.LIB, 2)} | floors
    assert "gpus" not in res[0] and res[2]["gpus"] == 2      # host only, and two fake GPUs sampled
    assert res[(bench.LIB, 2)]["gpus"] == 2                  # the real binding over the fake C library
    # floor.py and floor.c beside the host-only daemon: 3 wake-ups on the same grid, each costing something
    for _, mode in floors:
        fl = res[("floor", mode)]
        assert fl["mode"] == mode and fl["ticks"] == 3 and 0 < fl["cpu_s_per_sample"] < 0.05
    for st in (res[0], res[2], res[(bench.LIB, 2)]):
        assert st["samples"] == (4 if st.get("gpus") else 3)   # + the closing sample with every counter
        assert 0 < st["cpu_s_per_sample"] < 0.05 and 0 < st["core_pct"] < 10
        assert st["rss_mib"] > 1
