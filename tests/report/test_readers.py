"""The CSV and JSON-lines readers on the log contract's edge cases, both CSV engines."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import synth  # noqa: E402
from synth import GpuSpec, HostSpec, T0, write_run  # noqa: E402

from hpclaunch.monitors import schema  # noqa: E402
from hpclaunch.reports import metrics_log, readers  # noqa: E402

ENGINES = ["csv"] + (["pyarrow"] if readers.have_pyarrow() else [])


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("mode", ["last_cell", True])
def test_unterminated_last_line_is_dropped_for_every_csv_kind(tmp_path, engine, mode):
    """GPU, host and power-trace files whose last line was cut (inside its last cell: right cell
    count; or in the middle: wrong count) give exactly the complete rows, and count the cut one."""
    write_run(tmp_path, [GpuSpec("n1", 0), GpuSpec("n1", 1)], hosts=[HostSpec("n1")], duration=60,
              partial_last_line=mode)
    synth.write_power_trace(tmp_path, "n1", gpus=1, n=50, partial_last_line=mode)
    mon = tmp_path / schema.MONITOR_DIR
    g = readers.read_gpu_log(mon / schema.gpu_file("n1"), engine)
    assert g.engine == engine and g.n == 2 * 61 and g.skipped_rows == 1
    assert g.col("time_unix").max() == T0 + 60
    h = readers.read_host_log(mon / schema.host_file("n1"), engine)
    assert h.n == 13 and h.skipped_rows == 1
    assert set(h.col("monitor_rss_mib").tolist()) == {30.0}       # never 31 (the cut "31.25")
    assert h.col("time_unix").max() == T0 + 60
    p = readers.read_power_trace(mon / schema.power_trace_file("n1"), engine)
    assert p.n == 50 and p.skipped_rows == 1
    assert set(p.col("power_w").tolist()) == {300.0}              # never 312 (the cut "312.5")


@pytest.mark.parametrize("engine", ENGINES)
def test_complete_file_counts_nothing_skipped(tmp_path, engine):
    write_run(tmp_path, [GpuSpec("n1", 0)], hosts=[HostSpec("n1")], duration=30)
    g = readers.read_gpu_log(tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1"), engine)
    assert g.n == 31 and g.skipped_rows == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_cut_header_is_no_header(tmp_path, engine):
    p = tmp_path / "n1.gpu.csv"
    p.write_text(schema.header_comment(schema.GPU_SCHEMA) + ",".join(schema.GPU_COLUMNS)[:40])
    t = readers.read_gpu_log(p, engine)
    assert t.n == 0 and any("no header" in w for w in t.warnings)


@pytest.mark.parametrize("engine", ENGINES)
def test_unterminated_line_longer_than_the_search_chunk(tmp_path, engine):
    p = tmp_path / "n1.power_trace.csv"
    p.write_text(schema.header_comment(schema.POWER_TRACE_SCHEMA) + ",".join(schema.POWER_TRACE_COLUMNS) + "\n"
                 + f"{T0},n1,0,300.0\n" + "x" * 200_000)
    t = readers.read_power_trace(p, engine)
    assert t.n == 1 and t.skipped_rows == 1 and t.col("power_w").tolist() == [300.0]


def test_jsonl_unterminated_last_record_is_skipped_even_if_it_parses(tmp_path):
    p = tmp_path / "n1.events.jsonl"
    recs = [{"time_unix": 1.0, "kind": "header"}, {"time_unix": 2.0, "kind": "stopped"}]
    p.write_text(json.dumps(recs[0]) + "\n" + json.dumps(recs[1]))  # cut just before its newline
    got, bad = readers.read_jsonl(p)
    assert got == recs[:1] and bad == 1


@pytest.mark.parametrize("engine", ["csv", "pyarrow"])
def test_metrics_unterminated_last_record_is_skipped(tmp_path, engine):
    if engine == "pyarrow" and not readers.have_pyarrow():
        pytest.skip("pyarrow not installed")
    p = tmp_path / "rank0.jsonl"
    step = {"kind": "step", "time_unix": T0, "step": 0, "loss": 1.0}
    p.write_text(json.dumps(step) + "\n" + json.dumps(dict(step, step=1, loss=123.0)))
    a, bad = metrics_log.read_metrics_arrays(p, engine="auto" if engine == "pyarrow" else "csv")
    assert bad == 1 and a["step"].tolist() == [0.0] and not np.isin(123.0, a["loss"])


@pytest.mark.skipif(not readers.have_pyarrow(), reason="pyarrow engine only")
@pytest.mark.parametrize("chunk", [64 << 20, 97])
def test_bad_lines_mid_file_are_filtered_without_leaving_pyarrow(tmp_path, monkeypatch, chunk):
    """Lines with too few or too many cells, blank lines and a stray quote in the middle of a GPU
    log: the pyarrow engine drops exactly the bad lines itself (numpy filter, any filter window
    size) and reads the rest as the csv module does."""
    from hpclaunch.reports import csv_arrow

    monkeypatch.setattr(csv_arrow, "FILTER_CHUNK", chunk)
    write_run(tmp_path, [GpuSpec("n1", 0), GpuSpec("n1", 1)], duration=30)
    p = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    lines = p.read_text().splitlines(keepends=True)
    good = lines[2:]
    bad = ["1,2,3\n", lines[5].rstrip("\n") + ",extra\n", "\n", lines[6].replace(",", ';"', 1)]
    p.write_text("".join(lines[:2] + good[:10] + bad[:2] + good[10:30] + bad[2:] + good[30:]))
    a = readers.read_gpu_log(p, "pyarrow")
    c = readers.read_gpu_log(p, "csv")
    assert a.engine == "pyarrow" and a.n == c.n == len(good)
    assert a.skipped_rows == c.skipped_rows == 3  # the blank line is no row
    for col in ("time_unix", "energy_mj", "power_w"):
        np.testing.assert_array_equal(a.col(col), c.col(col))
    np.testing.assert_array_equal(a.text_values("gpu_uuid"), c.text_values("gpu_uuid"))


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_byte_order_mark_at_the_start_of_a_log_is_read_past(tmp_path, engine):
    """Issue 44, item 9: a UTF-8 byte-order mark (a Windows editor, a copy through another tool)
    before the schema line made it no comment, the schema line the header and every column absent:
    the file's data dropped, with a warning. It is read as without the mark, every kind of log."""
    from hpclaunch.reports import build_report, events

    write_run(tmp_path / "plain", [GpuSpec("n1", 0), GpuSpec("n1", 1)], hosts=[HostSpec("n1")], duration=60)
    (tmp_path / "plain" / schema.MONITOR_DIR / schema.events_file("n1")).write_text(json.dumps(
        {"time_unix": T0, "host": "n1", "kind": "header", "detail": {"interval_s": 1.0}}) + "\n")
    (tmp_path / "plain" / "metrics").mkdir(exist_ok=True)
    (tmp_path / "plain" / "metrics" / "rank0.jsonl").write_text(
        json.dumps({"kind": "step", "time_unix": T0, "rank": 0, "step": 0, "loss": 1.0, "samples": 8}) + "\n")
    marked = tmp_path / "marked"
    import shutil
    shutil.copytree(tmp_path / "plain", marked)
    for p in list((marked / schema.MONITOR_DIR).iterdir()) + [marked / "metrics" / "rank0.jsonl"]:
        p.write_bytes(BOM + p.read_bytes())
    mon = marked / schema.MONITOR_DIR
    g = readers.read_gpu_log(mon / schema.gpu_file("n1"), engine)
    assert g.n == 2 * 61 and not g.missing_columns and g.schema_line == schema.GPU_SCHEMA and not g.warnings
    h = readers.read_host_log(mon / schema.host_file("n1"), engine)
    assert h.n == 13 and h.skipped_rows == 0 and not h.warnings
    recs, bad = readers.read_jsonl(mon / schema.events_file("n1"))
    assert recs[0]["kind"] == "header" and bad == 0
    assert events.recorded_intervals([mon / schema.events_file("n1")]) == {"n1": 1.0}
    a, bad = metrics_log.read_metrics_arrays(marked / "metrics" / "rank0.jsonl", engine="auto" if engine == "pyarrow" else "csv")
    assert bad == 0 and a["step"].tolist() == [0.0]
    one, other = build_report(tmp_path / "plain", engine=engine).data, build_report(marked, engine=engine).data
    assert one["energy_j"] == other["energy_j"] and one["warnings"] == other["warnings"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_header_naming_a_column_twice_is_read_first_wins_and_said(tmp_path, engine):
    """Issue 44, item 9: a header with a column twice (a hand-made or merged log) was read
    first-wins in silence. It still is (docs/monitor-logs.md), with one warning naming the file and
    the column."""
    cols = list(schema.HOST_COLUMNS) + ["cpu_pct"]
    p = tmp_path / "n1.host.csv"
    row = ["1763000000.0", "n1", "12.5", "", "", "", "", "", "", ""]
    p.write_text(schema.header_comment(schema.HOST_SCHEMA) + ",".join(cols) + "\n" + ",".join(row + ["99.0"]) + "\n")
    h = readers.read_host_log(p, engine)
    assert h.n == 1 and h.col("cpu_pct").tolist() == [12.5]
    assert h.warnings == [f"{p}: the header names a column more than once: cpu_pct (2x); the first of each is read, "
                          "the others ignored"], h.warnings
