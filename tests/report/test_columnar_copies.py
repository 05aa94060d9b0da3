"""Columnar copies of finished logs (reports/columnar.py, issue 20): a later report reads them instead of
parsing the CSV again, gives the same report to the last digit, and never trusts a copy that does not
describe the log as it is now."""
import json
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from synth import GpuSpec, HostSpec, T0, write_run  # noqa: E402

from hpclaunch.monitors import schema  # noqa: E402
from hpclaunch.reports import build_report, columnar, csv_arrow, metrics_log, readers, render, to_json  # noqa: E402

pytest.importorskip("pyarrow")


def ended_run(d, *, ended=True, partial_last_line="last_cell"):
    """A run directory as a finished 2-node job leaves it (its own record says it ended)."""
    gpus = [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1"), GpuSpec("n2", 0, ranks="2")]
    exp = write_run(d, gpus, [HostSpec("n1"), HostSpec("n2")], duration=900, partial_last_line=partial_last_line,
                    metrics={"ranks": 3, "steps": 50})
    state = d / ".hpclaunch" / "state"
    state.parent.mkdir()
    state.write_text(f"{int(T0)} attempt=0 start\n" + (f"{int(T0) + 1000} attempt=0 end\n" if ended else ""))
    return exp


def copies(d):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*.arrow"))


class Parses:
    """Counts the CSV and JSON parses a report makes."""

    def __init__(self, monkeypatch):
        self.csv = self.metrics = 0
        real_csv, real_metrics = csv_arrow.parse, metrics_log._read_metrics_text

        def csv(*a, **k):
            self.csv += 1
            return real_csv(*a, **k)

        def metrics(*a, **k):
            self.metrics += 1
            return real_metrics(*a, **k)
        monkeypatch.setattr(csv_arrow, "parse", csv)
        monkeypatch.setattr(metrics_log, "_read_metrics_text", metrics)


def test_a_later_report_reads_the_copies_and_says_the_same(tmp_path, monkeypatch):
    exp = ended_run(tmp_path)
    parses = Parses(monkeypatch)
    first = build_report(tmp_path)
    assert (parses.csv, parses.metrics) == (4, 3)  # 2 GPU logs, 2 host logs, 3 ranks
    assert copies(tmp_path) == [
        "metrics/.columnar/rank0.jsonl.arrow", "metrics/.columnar/rank1.jsonl.arrow",
        "metrics/.columnar/rank2.jsonl.arrow", "monitor/.columnar/n1.gpu.csv.arrow",
        "monitor/.columnar/n1.host.csv.arrow", "monitor/.columnar/n2.gpu.csv.arrow",
        "monitor/.columnar/n2.host.csv.arrow"]
    later = build_report(tmp_path)
    assert (parses.csv, parses.metrics) == (4, 3)  # nothing parsed again
    assert to_json(later) == to_json(first)
    assert render(later, "html") == render(first, "html")  # the series too
    assert later.data["energy_j"]["gpu"] == pytest.approx(exp["gpu_total"], rel=1e-6)
    # the cut last lines are still counted as skipped, from the copy
    assert later.data["coverage"]["malformed_rows_skipped"] == first.data["coverage"]["malformed_rows_skipped"] > 0


def test_a_log_that_changed_is_parsed_again_and_its_copy_replaced(tmp_path, monkeypatch):
    ended_run(tmp_path, partial_last_line=False)
    first = build_report(tmp_path)
    log = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n2")
    old_copy = columnar.copy_path(log).read_bytes()
    last = log.read_text().splitlines()[-1].split(",")
    last[0] = repr(float(last[0]) + 1.0)  # one more sample, a second later
    with open(log, "a") as f:
        f.write(",".join(last) + "\n")
    parses = Parses(monkeypatch)
    later = build_report(tmp_path)
    assert parses.csv == 1  # that log only
    assert later.data["coverage"]["gpu_rows_read"] == first.data["coverage"]["gpu_rows_read"] + 1
    assert columnar.copy_path(log).read_bytes() != old_copy
    build_report(tmp_path)
    assert parses.csv == 1


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "other kind", "other source"])
def test_a_damaged_or_foreign_copy_is_never_trusted(tmp_path, monkeypatch, damage):
    ended_run(tmp_path)
    first = build_report(tmp_path)
    log = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    cp = columnar.copy_path(log)
    data = cp.read_bytes()
    if damage == "garbage":
        cp.write_bytes(b"\x00hpclaunch" * 1000)
    elif damage == "truncated":
        cp.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        cp.write_bytes(b"")
    else:  # a valid copy of something else: another reader's, or another file's
        other = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n2")
        if damage == "other kind":
            st = os.stat(log)
            arrays, meta = columnar.load(log, _gpu_kind(), st)
            assert columnar.store(log, "another reader", st, arrays, meta)
        else:
            shutil.copyfile(columnar.copy_path(other), cp)
    parses = Parses(monkeypatch)
    later = build_report(tmp_path)
    assert parses.csv == 1
    assert to_json(later) == to_json(first)
    assert columnar.load(log, _gpu_kind(), os.stat(log)) is not None  # rewritten


def _gpu_kind():
    return json.dumps(["csv", readers.TABLE_COPY_FORMAT, schema.GPU_SCHEMA, list(readers.GPU_NUMERIC),
                       list(readers.GPU_TEXT), list(readers.GPU_OPTIONAL), ["host", "gpu_index"]])


def test_no_copy_of_a_running_job_nor_of_a_fresh_log_without_a_record(tmp_path):
    # logs under columnar.MIN_PREFIX: no copy of their part written so far either (test_growing_logs.py)
    ended_run(tmp_path / "running", ended=False)
    build_report(tmp_path / "running")
    assert copies(tmp_path / "running") == []
    d = tmp_path / "norecord"
    ended_run(d)
    (d / ".hpclaunch" / "state").unlink()
    build_report(d)
    assert copies(d) == []  # just written: it may still grow
    old = T0  # unchanged for long: settled
    for p in d.rglob("*.*"):
        os.utime(p, (old, old))
    build_report(d)
    assert len(copies(d)) == 7


def test_the_job_scripts_accounting_step_leaves_the_copies_the_users_report_reads(tmp_path, monkeypatch):
    """The epilogue runs `python -m hpclaunch.reports.slurm_comment` once every monitor stopped, before
    the run's record says it ended: it writes the copies then, so the user's first report parses nothing."""
    from hpclaunch.reports import slurm_comment

    ended_run(tmp_path, ended=False)
    build_report(tmp_path)
    assert copies(tmp_path) == []  # a report of a running job writes none
    assert slurm_comment.main([str(tmp_path)]) == 0
    assert len(copies(tmp_path)) == 7
    with open(tmp_path / ".hpclaunch" / "state", "a") as f:
        f.write(f"{int(T0) + 1000} attempt=0 end\n")
    parses = Parses(monkeypatch)
    after = build_report(tmp_path)
    assert (parses.csv, parses.metrics) == (0, 0)
    assert to_json(after) == to_json(build_report(tmp_path, engine="pyarrow"))


def test_a_directory_it_cannot_write_gets_no_copy_and_the_same_report(tmp_path):
    ended_run(tmp_path)
    for sub in ("monitor", "metrics"):
        (tmp_path / sub / columnar.SUBDIR).write_text("not a directory")
    first = build_report(tmp_path)
    assert copies(tmp_path) == []
    assert to_json(build_report(tmp_path)) == to_json(first)


def test_a_copy_folder_that_is_a_link_gets_no_copy(tmp_path):
    """A colleague's run directory on a shared folder: its owner (or anyone who can write it) links
    `.columnar` to a folder of the reader's; the report writes nothing there (issue 44's audit)."""
    run = tmp_path / "run"
    ended_run(run)
    mine = tmp_path / "mine"
    mine.mkdir()
    for sub in ("monitor", "metrics"):
        os.symlink(mine, run / sub / columnar.SUBDIR)
    first = build_report(run)
    assert os.listdir(mine) == []
    assert to_json(build_report(run)) == to_json(first)


def test_a_copy_is_not_written_from_a_log_that_changed_while_it_was_read(tmp_path):
    ended_run(tmp_path)
    log = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    st = os.stat(log)
    table = readers.read_gpu_log(log, "pyarrow")
    with open(log, "a") as f:
        f.write("\n")
    assert not columnar.store(log, _gpu_kind(), st, {"n:x": table.col("power_w")}, {})
    assert not columnar.copy_path(log).exists()


def test_a_moved_run_directory_reports_its_new_paths(tmp_path):
    ended_run(tmp_path / "a")
    log = tmp_path / "a" / schema.MONITOR_DIR / schema.gpu_file("n1")
    lines = log.read_text().split("\n", 1)
    name, _, _ = schema.GPU_SCHEMA.partition("/")
    log.write_text(f"# schema={name}/99\n" + lines[1])  # a newer writer: the reader warns, naming the file
    first = build_report(tmp_path / "a")
    assert any(w.startswith(f"{log}: schema version 99") for w in first.data["warnings"])
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = build_report(tmp_path / "b")
    moved_log = tmp_path / "b" / schema.MONITOR_DIR / schema.gpu_file("n1")
    assert columnar.load(moved_log, _gpu_kind(), os.stat(moved_log)) is not None  # a move keeps copies valid
    assert any(w.startswith(f"{moved_log}: schema version 99") for w in moved.data["warnings"])
    assert str(tmp_path / "a") not in to_json(moved)


def test_an_explicit_engine_reads_the_csv(tmp_path, monkeypatch):
    ended_run(tmp_path)
    build_report(tmp_path)
    parses = Parses(monkeypatch)
    build_report(tmp_path, engine="pyarrow")
    assert parses.csv == 4


def test_what_a_copy_cannot_hold_is_not_written_and_never_fails_the_report(tmp_path):
    src = tmp_path / "x.csv"
    src.write_text("a\n")
    st = os.stat(src)
    import numpy as np
    assert not columnar.store(src, "k", st, {"a": np.zeros(2, np.int64)}, {})  # not a copy's type
    assert not columnar.store(src, "k", st, {"a": np.zeros(2)}, {"x": object()})  # not JSON
    assert not columnar.copy_path(src).exists()
    assert columnar.store(src, "k", st, {"a": np.zeros(2)}, {})


def test_the_first_read_returns_what_it_stored(tmp_path, monkeypatch):
    """The report that writes a copy goes on with the copy's table, not the CSV's: rows grouped by GPU
    (the daemon writes them one sweep at a time) and the column ranges known, the same table every
    later report reads, so the first report skips that work too."""
    ended_run(tmp_path)
    log = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    from_csv = readers.read_gpu_log(log, copies=None)
    parses = Parses(monkeypatch)
    first = readers.read_gpu_log(log, copies=columnar.Policy(run_ended=True))
    assert parses.csv == 1 and columnar.copy_path(log).exists()
    later = readers.read_gpu_log(log, copies=columnar.Policy(run_ended=True))
    assert parses.csv == 1  # from the copy
    gi = from_csv.col("gpu_index")
    assert list(gi[:4]) == [0.0, 1.0, 0.0, 1.0]  # the file: one row per GPU per sweep
    half = from_csv.n // 2
    assert list(first.col("gpu_index")) == [0.0] * half + [1.0] * half  # grouped, file order kept within
    assert first.bounds and first.bounds == later.bounds
    assert first.bounds["power_w"] == (float(np.nanmin(from_csv.col("power_w"))),
                                       float(np.nanmax(from_csv.col("power_w"))))
    a, b = first, later
    assert (a.n, a.schema_line, a.missing_columns, a.skipped_rows, a.engine, a.warnings) == \
        (b.n, b.schema_line, b.missing_columns, b.skipped_rows, b.engine, b.warnings)
    assert a.num.keys() == b.num.keys() and a.text.keys() == b.text.keys()
    for c in a.num:
        np.testing.assert_array_equal(a.num[c], b.num[c])
    for c in a.text:
        np.testing.assert_array_equal(a.text[c][0], b.text[c][0])
        assert a.text[c][1] == b.text[c][1]
    t0 = from_csv.col("time_unix")
    np.testing.assert_array_equal(first.col("time_unix")[:half], t0[gi == 0])
    # a job still running: no copy, the CSV's own table
    running = tmp_path / "running"
    ended_run(running, ended=False)
    log2 = running / schema.MONITOR_DIR / schema.gpu_file("n1")
    t = readers.read_gpu_log(log2, copies=columnar.Policy(run_ended=False))
    assert not t.bounds and list(t.col("gpu_index")[:2]) == [0.0, 1.0]
