"""Rows a report must not trust (issue 15, defect 6), each shown against the analytic truth of a
synthetic run: a row stamped at time 0 or 3e8 s ahead, an energy counter glitching to -5, infinite
readings. Before: a 1.8e16 s duration and GiBs of bins, 40 MJ for a ~27 kJ job, tracebacks. And
figures that must not contradict each other: an average printed over its maximum."""
import os
import resource
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import T0, GpuSpec, HostSpec, write_run  # noqa: E402

from hpclaunch.reports import build_report, render  # noqa: E402
from hpclaunch.reports.nanstats import nanmean, nanmean_max  # noqa: E402
from hpclaunch.reports.plausible import WINDOW_SLACK_S, run_window  # noqa: E402


def _run(tmp_path, state=True):
    rd = tmp_path / "run"
    exp = write_run(rd, [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1")], hosts=[HostSpec("n1")],
                    duration=300, jitter=0.2, metrics=None)
    if state:
        (rd / ".hpclaunch").mkdir(exist_ok=True)
        (rd / ".hpclaunch" / "state").write_text(f"{int(T0) - 2} attempt=0 start host=n1 nodes=1\n"
                                                  f"{int(T0) + 302} attempt=0 end rc=0 outcome=completed\n")
    return rd, exp


def _edit_rows(rd, edit, name="n1.gpu.csv"):
    path = rd / "monitor" / name
    lines = path.read_text().splitlines(keepends=True)
    head = [i for i, line in enumerate(lines) if line.startswith("time_unix")][0]
    header = lines[head].rstrip("\n").split(",")
    rows = [line.rstrip("\n").split(",") for line in lines[head + 1:]]
    edit(header, rows)
    path.write_text("".join(lines[:head + 1]) + "".join(",".join(r) + "\n" for r in rows))


def test_rows_stamped_outside_the_run_are_dropped_and_said(tmp_path):
    rd, exp = _run(tmp_path)

    def far(header, rows):
        t = header.index("time_unix")
        for when in ("0.000", f"{T0 + 3e8:.3f}", "17954661795466094.922"):
            row = list(rows[len(rows) // 2])
            row[t] = when
            rows.append(row)
    _edit_rows(rd, far)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    d = build_report(rd).data
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert d["duration_s"] == pytest.approx(300, abs=2), d["duration_s"]
    assert d["energy_j"]["gpu"] == pytest.approx(exp["gpu_total"], rel=1e-3)
    assert any("n1.gpu.csv: dropped 3 row(s) stamped outside the run's window" in w for w in d["warnings"]), \
        d["warnings"]
    assert grown_mib < 200, grown_mib


def test_a_negative_counter_reading_is_a_glitch_not_a_reset(tmp_path):
    rd, exp = _run(tmp_path)

    def glitch(header, rows):
        e, g = header.index("energy_mj"), header.index("gpu_index")
        rows[len(rows) // 2 + (rows[len(rows) // 2][g] != "0")][e] = "-5"
    _edit_rows(rd, glitch)
    d = build_report(rd).data
    assert d["energy_j"]["gpu"] == pytest.approx(exp["gpu_total"], rel=1e-3)   # not +1e9 mJ from -5
    assert any("1 negative counter reading(s) treated as missing" in w for w in d["warnings"]), d["warnings"]
    assert not any("counter reset" in w.lower() for w in d["warnings"]), d["warnings"]


def test_infinite_readings_are_missing_and_every_format_renders(tmp_path):
    rd, _ = _run(tmp_path)

    def inf(header, rows):
        p, t = header.index("power_w"), header.index("temp_c")
        rows[3][p] = "inf"
        rows[4][t] = "-inf"
    _edit_rows(rd, inf)
    rep = build_report(rd)
    assert any("2 infinite reading(s) treated as missing" in w for w in rep.data["warnings"]), rep.data["warnings"]
    for fmt in ("text", "json", "html"):
        assert render(rep, fmt)


def test_window_from_the_job_scripts_record(tmp_path):
    rd, _ = _run(tmp_path)
    assert run_window(rd) == (T0 - 2 - WINDOW_SLACK_S, T0 + 302 + WINDOW_SLACK_S)
    rd2, _ = _run(tmp_path / "nostate", state=False)
    assert run_window(rd2) is None   # copied logs, synthetic runs: nothing dropped for its time


def test_a_later_report_from_the_copies_drops_and_says_the_same(tmp_path):
    """Copies carry each float column's (min, max) so a later report skips the checks that cannot find
    anything; every implausible kind at once, the report from the copies is the first one exactly."""
    pytest.importorskip("pyarrow")
    from hpclaunch.reports import readers, to_json

    rd, exp = _run(tmp_path)

    def all_kinds(header, rows):
        t, e, p = header.index("time_unix"), header.index("energy_mj"), header.index("power_w")
        rows[len(rows) // 2][e] = "-5"
        rows[3][p] = "inf"
        row = list(rows[10])
        row[t] = "0.000"
        rows.append(row)
    _edit_rows(rd, all_kinds)
    first = build_report(rd)
    copy = rd / "monitor" / ".columnar" / "n1.gpu.csv.arrow"
    assert copy.exists()
    later = build_report(rd)
    assert to_json(later) == to_json(first)
    warned = [w for w in later.data["warnings"] if "n1.gpu.csv:" in w]
    assert any("dropped 1 row(s)" in w and "1 infinite" in w and "1 negative counter" in w for w in warned), warned
    assert later.data["energy_j"]["gpu"] == pytest.approx(exp["gpu_total"], rel=1e-3)
    # the copy's bounds are what the checks skip on: they show the bad values, so nothing was skipped
    table = readers.read_gpu_log(rd / "monitor" / "n1.gpu.csv", copies=readers.columnar.Policy(run_ended=True))
    assert table.bounds["energy_mj"][0] == -5 and table.bounds["power_w"][1] == float("inf")
    assert table.bounds["time_unix"][0] == 0.0


def test_malformed_bounds_in_a_copy_are_ignored():
    from hpclaunch.reports.table import bounds_of_copy as _bounds_of_copy

    assert _bounds_of_copy({"bounds": {"a": [1.0, 2.0], "b": [None, None]}}) == {"a": (1.0, 2.0), "b": (None, None)}
    for bad in ({"a": [1.0]}, {"a": ["1", 2.0]}, {"a": [None, 2.0]}, {"a": (1.0, 2.0)}, ["a"], None):
        assert _bounds_of_copy({"bounds": bad}) == {}
    assert _bounds_of_copy({}) == {}


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1e4, allow_nan=False), st.integers(1, 400))
def test_an_average_is_never_above_its_maximum(v, n):
    """n equal readings: their float mean can land an ulp above them (3 x 0.485)."""
    avg, mx = nanmean_max(np.full(n, v))
    assert round(avg, 2) <= round(mx, 2) and avg <= mx


def test_report_averages_stay_under_their_maximums(tmp_path):
    """CI printed a load1 avg of 0.49 over a max of 0.48. Every host reading 0.475 and every GPU
    temperature 40.165: the float mean of 61 (301) such readings is above them and rounds up (0.48,
    40.17) where the readings round down (0.47, 40.16). Each average must print as its maximum."""
    rd, _ = _run(tmp_path)
    assert round(nanmean(np.full(61, 0.475)), 2) > 0.47 and round(nanmean(np.full(301, 40.165)), 2) > 40.16

    def host(header, rows):
        for r in rows:
            for c in ("load1", "cpu_pct"):
                r[header.index(c)] = "0.475"

    def temp(header, rows):
        for r in rows:
            r[header.index("temp_c")] = "40.165"
    _edit_rows(rd, host, "n1.host.csv")
    _edit_rows(rd, temp)
    d = build_report(rd).data
    node = d["nodes"][0]
    assert node["load1"] == {"avg": 0.47, "max": 0.47}, node["load1"]
    assert node["avg_cpu_pct"] == node["max_cpu_pct"] == 0.47, node
    assert len(d["gpus"]) == 2
    for g in d["gpus"]:
        assert g["avg_temp_c"] == g["max_temp_c"] == 40.16, g


# -- the report without a job record (issue 44, defect 3) ----------------------------------------------

PROBE = r"""
import json, resource, sys, time
from hpclaunch.reports import build_report, render
clean, bad = sys.argv[1], sys.argv[2:]
rep = build_report(clean)
for fmt in ("text", "json", "html"):   # imports and first-use costs, outside what is measured
    render(rep, fmt)
vm = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize")][0] * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + (2 << 30),) * 2)   # a 13 GiB ask fails here, never swaps
out = []
for rd in bad:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    rep = build_report(rd)
    sizes = [len(render(rep, fmt)) for fmt in ("text", "json", "html")]
    out.append({"s": time.perf_counter() - start, "mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
                "duration": rep.data["duration_s"], "energy": rep.data["energy_j"], "warnings": rep.data["warnings"],
                "sizes": sizes})
print(json.dumps(out))
"""
ABSURD = ("0.000", "1e-9", "-5", "-1e308", "1e18")


def test_a_run_without_its_record_bounds_every_window_by_the_data(tmp_path):
    """Logs copied off a cluster, a monitor started by hand, a state file never written: one row at
    0, 1e-9, a negative time or 1e18 made numpy allocate 12.7 GiB (or EiB) for the peak-power bins,
    or a report of 1e18 s. Each such run, a GPU or a host row at a time, is reported in every format
    within a second and 200 MiB, with the clean run's duration and energies, and the row's file and
    time named in the warning that drops it."""
    import json
    import subprocess

    clean, exp = _run(tmp_path / "clean", state=False)
    runs, cases = [], []
    for name in ("n1.gpu.csv", "n1.host.csv"):
        for when in ABSURD:
            rd, _ = _run(tmp_path / f"{name}-{when}", state=False)

            def stamp(header, rows, when=when):
                row = list(rows[len(rows) // 2])
                row[header.index("time_unix")] = when
                rows.append(row)
            _edit_rows(rd, stamp, name)
            runs.append(str(rd))
            cases.append((name, when))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(clean), *runs], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for (name, when), got in zip(cases, json.loads(proc.stdout)):
        assert got["s"] < 1.0 and got["mib"] < 200, (name, when, got["s"], got["mib"])
        assert got["duration"] == pytest.approx(300, abs=2), (name, when, got["duration"])
        assert got["energy"]["gpu"] == pytest.approx(exp["gpu_total"], rel=1e-3), (name, when, got["energy"])
        assert got["energy"]["cpu"] == pytest.approx(exp["cpu"]["n1"], rel=1e-2), (name, when, got["energy"])
        said = [w for w in got["warnings"] if w.startswith(f"{name}: dropped 1 row(s) stamped outside any plausible time")]
        assert len(said) == 1 and f"e.g. time_unix {float(when):.10g}" in said[0], (name, when, got["warnings"])
        assert all(got["sizes"]), got["sizes"]


def test_without_a_record_a_few_rows_days_away_from_the_rest_are_dropped(tmp_path):
    """Within the plausible years, the data bound the window: a row (or two) a node clock or a torn
    row put weeks away from the rest of its file is dropped and named; a group of rows is kept (an
    attempt requeued days later is data, and no record says otherwise)."""
    rd, exp = _run(tmp_path / "lone", state=False)

    def lone(header, rows):
        for when in (T0 - 3e8, T0 + 20 * 86400):
            row = list(rows[5])
            row[header.index("time_unix")] = f"{when:.3f}"
            rows.append(row)
    _edit_rows(rd, lone)
    d = build_report(rd).data
    assert d["duration_s"] == pytest.approx(300, abs=2)
    assert any(w.startswith("n1.gpu.csv: dropped 2 row(s) lying over 7 days from the rest of the file")
               for w in d["warnings"]), d["warnings"]
    rd, _ = _run(tmp_path / "later", state=False)

    def later(header, rows):   # 40 rows, 10 days on: a second attempt's, say
        t = header.index("time_unix")
        for row in rows[:40]:
            row = list(row)
            row[t] = f"{float(row[t]) + 10 * 86400:.3f}"
            rows.append(row)
    _edit_rows(rd, later)
    d = build_report(rd).data
    assert d["duration_s"] == pytest.approx(10 * 86400 + 20, abs=30), d["duration_s"]
    assert not any("dropped" in w for w in d["warnings"]), d["warnings"]


def test_a_record_no_row_could_match_still_bounds_the_window(tmp_path):
    from hpclaunch.reports.plausible import EPOCH_FLOOR, FUTURE_SLACK_S, report_window

    rd, _ = _run(tmp_path)
    (rd / ".hpclaunch" / "state").write_text("0 attempt=0 start\n5 attempt=0 end rc=0\n")   # a broken clock
    w = report_window(rd, now=T0 + 1000)
    assert (w.lo, w.hi, w.record) == (EPOCH_FLOOR, T0 + 1000 + FUTURE_SLACK_S, False)
    (rd / ".hpclaunch" / "state").write_text(f"0 attempt=0 start\n{int(T0) + 302} attempt=0 end rc=0\n")
    w = report_window(rd, now=T0 + 1000)
    assert (w.lo, w.hi, w.record) == (EPOCH_FLOOR, T0 + 302 + WINDOW_SLACK_S, True)


def test_readings_beyond_any_physical_value_are_missing_and_every_format_renders(tmp_path):
    """Power 1e308 on every row (issue 44, item 9): the HTML report divided by zero (a chart's span
    overflowed), the text one took int(NaN), the peak was 1e308 W."""
    rd, exp = _run(tmp_path)

    def huge(header, rows):
        for r in rows:
            r[header.index("power_w")] = "1e308"
        rows[7][header.index("temp_c")] = "-1e300"
    _edit_rows(rd, huge)
    rep = build_report(rd)
    d = rep.data
    assert d["energy_j"]["gpu"] == pytest.approx(exp["gpu_total"], rel=1e-3)   # the counter's
    assert d["power_w"]["gpu_peak"] is None and all(g["max_power_w"] is None for g in d["gpus"])
    assert any("n1.gpu.csv:" in w and "603 reading(s) beyond any physical value" in w for w in d["warnings"]), \
        d["warnings"]
    for fmt in ("text", "json", "html"):
        assert render(rep, fmt)
