"""The log writers: contract layout, append on requeue, partial lines, full disk."""

import errno
import json
import os
import stat

import pytest
from hypothesis import given, settings, strategies as st

from hpclaunch.monitors import schema
from hpclaunch.reports import readers
from hpclaunch.monitors.logfiles import CsvLog, EventLog, cell, format_rows, format_trace_rows
from monitor_helpers import read_csv

COLS = ("time_unix", "host", "a", "error")
ENGINES = ["csv"] + (["pyarrow"] if readers.have_pyarrow() else [])


def test_cells_empty_for_unmeasured_never_zero():
    assert cell(None) == "" and cell(float("nan")) == ""
    assert cell(0) == "0" and cell(0.0) == "0.0" and cell(1795315122.6371234) == "1795315122.637"
    assert cell("a,b\nc\"d") == "a;b c'd"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(), st.floats(allow_nan=True, allow_infinity=False),
                          st.text()), min_size=1, max_size=8))
def test_any_row_keeps_its_cell_count(row):
    line = format_rows([row])
    assert line.endswith("\n") and line.count("\n") == 1
    assert len(line[:-1].split(",")) == len(row)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(), st.floats(-2e12, 2e12), st.integers(-10**6, 10**6).map(lambda k: k / 2000),
                          st.none(), st.integers(), st.text(max_size=4)), min_size=1, max_size=8))
def test_rows_are_written_cell_by_cell(row):
    """format_rows inlines cell() for speed (floats by one conversion, not round then repr): the
    text must be cell()'s exactly, halves, signed zeros and the 1e12 boundary included."""
    row += [1795315122.6371234, 0.0005, 0.0015, -0.0004, 2.675, 999999999999.9995, 1e12, float("inf")]
    assert format_rows([row]) == ",".join(cell(v) for v in row) + "\n"


_TRACE_FLOAT = st.one_of(st.floats(), st.floats(-2e12, 2e12), st.integers(0, 2**62).map(lambda us: us / 1e6),
                         st.integers(0, 10**7).map(lambda mw: mw / 1000.0),
                         st.sampled_from([0.0005, 0.0015, -0.0004, 2.675, -0.0, 999999999999.9995, 1e12]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_TRACE_FLOAT, st.sampled_from(["n1", "n.100", "a,b"]), st.integers(0, 64), _TRACE_FLOAT),
                max_size=12))
def test_power_trace_rows_are_written_as_format_rows_writes_them(rows):
    """The trace's own formatter (no per-cell type dispatch) must write format_rows' text exactly:
    trailing zeros, halves, NaN and the 1e12 boundary included, a host cell with '.100' or a comma."""
    assert format_trace_rows(rows) == format_rows(rows)


def test_new_file_has_schema_line_and_header(tmp_path):
    p = str(tmp_path / "n.gpu.csv")
    log = CsvLog(p, schema.GPU_SCHEMA, COLS)
    log.write_rows([(1.5, "n", 3, None)])
    log.close()
    with open(p) as f:
        assert f.read() == "# schema=hpclaunch.monitor.gpu/1\ntime_unix,host,a,error\n1.5,n,3,\n"


def test_reopen_appends_without_second_header_and_ends_partial_line(tmp_path):
    p = str(tmp_path / "n.gpu.csv")
    log = CsvLog(p, schema.GPU_SCHEMA, COLS)
    log.write_rows([(1.0, "n", 1, None)])
    log.write_text("2.0,n,")  # what a SIGKILL mid-write could leave
    log.close()
    log = CsvLog(p, schema.GPU_SCHEMA, COLS)
    assert log.appended and log.moved_aside is None
    log.write_rows([(3.0, "n", 3, None)])
    log.close()
    first, header, rows = read_csv(p)
    assert header == list(COLS)
    assert [r["time_unix"] for r in rows] == ["1.0", "3.0"]
    assert open(p).read().count("# schema=") == 1


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("cut", ["inside_last_cell", "before_newline", "mid_row"])
def test_reopen_after_a_cut_row_never_glues_it_into_a_valid_row(tmp_path, engine, cut):
    """A requeued daemon appending after a row cut inside its last cell (right cell count, wrong
    value) must not turn it into a complete interior row: contract readers see only whole rows."""
    p = str(tmp_path / "n.host.csv")
    cols = schema.HOST_COLUMNS
    log = CsvLog(p, schema.HOST_SCHEMA, cols)
    log.write_rows([(1.0, "n", 5.0, 100, 4000, 0.5, None, 60, 0.01, 17.53)])
    line = format_rows([(2.0, "n", 5.0, 100, 4000, 0.5, None, 60, 0.02, 17.53)])[:-1]
    log.write_text({"inside_last_cell": line[:-3], "before_newline": line, "mid_row": line[:12]}[cut])
    log.close()
    log = CsvLog(p, schema.HOST_SCHEMA, cols)
    assert log.appended and log.closed_partial == 1
    log.write_rows([(3.0, "n", 5.0, 100, 4000, 0.5, None, 60, 0.03, 17.6)])
    log.close()
    _, _, rows = read_csv(p)
    assert [(r["time_unix"], r["monitor_rss_mib"]) for r in rows] == [("1.0", "17.53"), ("3.0", "17.6")]
    t = readers.read_host_log(p, engine)
    assert t.col("time_unix").tolist() == [1.0, 3.0] and t.skipped_rows == 1
    assert t.col("monitor_rss_mib").tolist() == [17.53, 17.6]
    assert open(p).read().count("# schema=") == 1


def test_reopen_after_a_header_without_its_newline_keeps_the_header(tmp_path):
    p = str(tmp_path / "n.gpu.csv")
    with open(p, "w") as f:
        f.write(schema.header_comment(schema.GPU_SCHEMA) + ",".join(COLS))  # killed after the header
    log = CsvLog(p, schema.GPU_SCHEMA, COLS)
    assert log.appended and log.closed_partial == 0 and log.moved_aside is None
    log.write_rows([(1.5, "n", 3, None)])
    log.close()
    with open(p) as f:
        assert f.read() == "# schema=hpclaunch.monitor.gpu/1\ntime_unix,host,a,error\n1.5,n,3,\n"


def test_other_schema_is_moved_aside(tmp_path):
    p = str(tmp_path / "n.gpu.csv")
    with open(p, "w") as f:
        f.write("# schema=hpclaunch.monitor.gpu/0\ntime_unix,x\n1,2\n")
    log = CsvLog(p, schema.GPU_SCHEMA, COLS)
    assert log.moved_aside == p + ".1.old" and os.path.exists(p + ".1.old")
    log.close()
    assert read_csv(p)[1] == list(COLS)


def test_full_disk_drops_rows_says_once_and_recovers(tmp_path):
    said = []
    full = [True]

    def write(fd, data):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)
    p = str(tmp_path / "n.host.csv")
    log = CsvLog(p, schema.HOST_SCHEMA, COLS, on_error=lambda path, e: said.append(e.errno), write=write)
    for i in range(5):
        assert not log.write_rows([(i, "n", i, None)])
    assert said == [errno.ENOSPC] and log.dropped_writes == 6  # header + 5 batches
    full[0] = False
    assert log.write_rows([(9, "n", 9, None)])
    log.close()
    # the header that could not be written goes first: the file is never without it
    assert open(p).read() == "# schema=hpclaunch.monitor.host/1\ntime_unix,host,a,error\n9,n,9,\n"


def test_recovery_is_reported_once_per_failure_streak(tmp_path):
    errors, recovered = [], []
    full = [False]

    def write(fd, data):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)
    p = str(tmp_path / "n.host.csv")
    log = CsvLog(p, schema.HOST_SCHEMA, COLS, write=write, on_error=lambda path, e: errors.append(path),
                 on_recover=lambda path, n, e: recovered.append((path, n, e.errno)))
    assert log.write_rows([(1, "n", 1, None)]) and log.write_rows([(2, "n", 2, None)])
    assert recovered == []                                   # never failed: nothing to report
    full[0] = True
    for i in range(3):
        assert not log.write_rows([(10 + i, "n", i, None)])
    full[0] = False
    assert log.write_rows([(20, "n", 20, None)]) and log.write_rows([(21, "n", 21, None)])
    assert recovered == [(p, 3, errno.ENOSPC)] and errors == [p]
    full[0] = True                                           # a second episode: said again, both ways
    assert not log.write_rows([(30, "n", 30, None)])
    full[0] = False
    assert log.write_rows([(31, "n", 31, None)])
    log.close()
    assert recovered == [(p, 3, errno.ENOSPC), (p, 1, errno.ENOSPC)] and errors == [p, p]
    assert log.dropped_writes == 4
    assert [r["time_unix"] for r in read_csv(p)[2]] == ["1", "2", "20", "21", "31"]


def test_daemon_logs_disk_full_then_recovered_with_the_count(tmp_path):
    from hpclaunch.monitors.daemon import Daemon, parse_args
    from monitor_helpers import read_events
    d = Daemon(parse_args(["--run-dir", str(tmp_path), "--no-nvml", "--host", "h"]), env={})
    d.setup()
    full = [True]

    def write(fd, data):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)
    d.host_log._write = write
    for _ in range(4):
        d.tick()
    full[0] = False
    d.tick()
    d.tick()
    d.finish()
    ev = read_events(os.path.join(str(tmp_path), schema.MONITOR_DIR, schema.events_file("h")))
    kinds = [e["kind"] for e in ev]
    assert kinds.count("disk_full") == 1 and kinds.count("disk_write_recovered") == 1
    assert kinds.index("disk_full") < kinds.index("disk_write_recovered")
    rec = next(e["detail"] for e in ev if e["kind"] == "disk_write_recovered")
    assert rec["path"].endswith(schema.host_file("h")) and rec["dropped_writes"] == 4 and rec["errno"] == 28
    assert set(kinds) <= set(schema.EVENT_KINDS)
    assert len(read_csv(os.path.join(str(tmp_path), schema.MONITOR_DIR, schema.host_file("h")))[2]) == 2


def test_dev_full_for_real(tmp_path):
    """A device that answers ENOSPC, at the log's name (a node of its own: a link to /dev/full would
    be moved aside, as any link at a log's name is)."""
    said = []
    p = str(tmp_path / "n.host.csv")
    os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 7))   # /dev/full's numbers; root, as CI runs
    log = CsvLog(p, schema.HOST_SCHEMA, COLS, on_error=lambda path, e: said.append(e.errno))
    assert not log.write_rows([(1, "n", 1, None)])
    assert said == [errno.ENOSPC]


def test_event_log_lines(tmp_path):
    p = str(tmp_path / "n.events.jsonl")
    ev = EventLog(p, "n", clock=lambda: 12.3456)
    ev.emit("stopped", {"reason": "SIGTERM"})
    ev.emit("error", {"obj": object()})  # not JSON-able: still one line
    ev.close()
    lines = [json.loads(x) for x in open(p)]
    assert lines[0] == {"time_unix": 12.346, "host": "n", "kind": "stopped", "detail": {"reason": "SIGTERM"}}
    assert lines[1]["kind"] == "error"


def test_event_log_reopened_after_a_cut_record(tmp_path):
    p = str(tmp_path / "n.events.jsonl")
    ev = EventLog(p, "n", clock=lambda: 1.0)
    ev.emit("header", {"pid": 1})
    ev.write_text('{"time_unix":2.0,"host":"n","kind":"stopped","detail":{"reason":"SIG')
    ev.close()
    ev = EventLog(p, "n", clock=lambda: 3.0)
    ev.emit("header", {"pid": 2})
    ev.close()
    recs, bad = readers.read_jsonl(p)
    assert [r["detail"]["pid"] for r in recs] == [1, 2] and bad == 1


def _half_then_full_disk(state):
    """os.write that writes half of the first batch it is given, then fails with ENOSPC
    (a disk that fills mid-line), and behaves once `state['full']` is cleared."""
    def write(fd, data):
        if state["full"]:
            if not state["cut"]:
                state["cut"] = True
                return os.write(fd, bytes(data[: max(1, len(data) // 2)]))
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)
    return write


@pytest.mark.parametrize("engine", ENGINES)
def test_a_row_cut_by_a_full_disk_never_joins_the_next_row(tmp_path, engine):
    """Issue 15: a short write cut a row inside its first cell; the next write finished that line,
    a valid-looking row with time 17954661795466094.922. Now the part is cut back off the file."""
    p = str(tmp_path / "n1.host.csv")
    state = {"full": False, "cut": False}
    log = CsvLog(p, schema.HOST_SCHEMA, COLS, write=_half_then_full_disk(state))
    assert log.write_rows([(1795466100.5, "n1", 1, "")])
    state["full"] = True
    assert not log.write_rows([(1795466101.5, "n1", 2, "")])
    state["full"] = False
    assert log.write_rows([(1795466102.5, "n1", 3, "")])
    with open(p) as f:
        rows = f.read().splitlines()[2:]
    assert rows == ["1795466100.5,n1,1,", "1795466102.5,n1,3,"], rows
    t = readers.read_table(p, schema.HOST_SCHEMA, ("time_unix", "a"), ("host",), engine=engine)
    assert list(t.col("time_unix")) == [1795466100.5, 1795466102.5]


def test_a_cut_that_cannot_be_removed_is_closed_off_and_skipped(tmp_path, monkeypatch):
    p = str(tmp_path / "n1.host.csv")
    state = {"full": False, "cut": False}
    log = CsvLog(p, schema.HOST_SCHEMA, COLS, write=_half_then_full_disk(state))
    assert log.write_rows([(1795466100.5, "n1", 1, "")])
    state["full"] = True

    def no_truncate(fd, size):
        raise OSError(errno.EIO, "Input/output error")
    monkeypatch.setattr(os, "ftruncate", no_truncate)
    assert not log.write_rows([(1795466101.5, "n1", 2, "")])
    state["full"] = False
    assert log.write_rows([(1795466102.5, "n1", 3, "")]) and log.torn_lines == 1
    t = readers.read_table(p, schema.HOST_SCHEMA, ("time_unix", "a"), ("host",), engine="csv")
    assert list(t.col("time_unix")) == [1795466100.5, 1795466102.5]


def test_events_are_strict_json(tmp_path):
    p = str(tmp_path / "n1.events.jsonl")
    log = EventLog(p, "n1", clock=lambda: 1795466100.0)
    log.emit("header", {"interval_s": float("inf"), "x": float("nan")})
    with open(p) as f:
        line = f.read()
    assert "Infinity" not in line and "NaN" not in line
    json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


@pytest.mark.parametrize("args, words", [
    (["--interval", "1e-320"], "--interval 1e-320: use a number of seconds from 0.05 to 3600"),
    (["--interval", "nan"], "--interval nan"),
    (["--duration", "nan"], "--duration nan: use a finite number"),
    (["--duration", "inf"], "--duration inf"),
    # issue 44: 0 and -1 were taken, and the monitor then never noticed its parent's end
    (["--parent-pid", "0"], "--parent-pid 0: give the pid of a running process (1 to 4194304)"),
    (["--parent-pid", "-1"], "--parent-pid -1: give the pid of a running process"),
    (["--parent-pid", "99999999999"], "--parent-pid 99999999999: give the pid"),   # was a traceback
])
def test_monitor_arguments_are_bounded(tmp_path, capsys, args, words):
    from hpclaunch.monitors.daemon import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(["--run-dir", str(tmp_path)] + args)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_an_unwritable_run_directory_is_one_line(tmp_path):
    import subprocess
    import sys
    (tmp_path / "file").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "hpclaunch.monitors", "--run-dir", str(tmp_path / "file"),
                           "--duration", "1", "--no-nvml"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("hpclaunch-monitor: error: --run-dir"), proc.stderr
