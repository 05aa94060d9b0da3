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
