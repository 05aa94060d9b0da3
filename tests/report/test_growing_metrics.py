"""A running job's metrics files read by parts (reports/metrics_log.py through columnar ``Growing``): a
report copies the first part of each large rank file, a later one parses only the records appended
since, and whatever it read from, the arrays equal the plain parse of the file as it is now."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_columnar_copies import ended_run  # noqa: E402
from test_growing_logs import RUNNING, source_of_copy  # noqa: E402

from hpclaunch.reports import columnar, metrics_log  # noqa: E402

pytest.importorskip("pyarrow")


def same(a, b) -> None:
    assert a[1] == b[1] and sorted(a[0]) == sorted(b[0])
    for k in a[0]:
        np.testing.assert_array_equal(a[0][k], b[0][k], err_msg=k)


@pytest.fixture
def rank0(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "MIN_PREFIX", 4096)  # the synthetic files are a few KB
    ended_run(tmp_path, ended=False)
    p = tmp_path / "metrics" / "rank0.jsonl"
    assert p.stat().st_size >= 4096 and not p.read_bytes().endswith(b"\n")  # its last line being written
    return p


def append(path, first_step: int, n: int, **over) -> int:
    """``n`` step records from ``first_step`` on, after the file's cut last line is ended. Returns the
    bytes appended after that line."""
    with open(path, "a") as f:
        f.write("\n")
    text = "".join(json.dumps({"kind": "step", "time_unix": 1.7e9 + s, "rank": 0, "epoch": 1, "step": s,
                               "loss": 1.0 / (s + 1), "samples_per_s": 64.0, "step_time_s": 0.5, "samples": 32,
                               **over}) + "\n" for s in range(first_step, first_step + n))
    with open(path, "a") as f:
        f.write(text)
    return len(text.encode())


def test_a_running_ranks_metrics_are_read_from_the_copied_part_and_the_records_after(rank0, monkeypatch):
    same(metrics_log.read_metrics_arrays(rank0, copies=RUNNING), metrics_log.read_metrics_arrays(rank0))
    src = source_of_copy(rank0)
    assert src[:3] == ["prefix", rank0.read_bytes().rfind(b"\n") + 1, rank0.stat().st_ino]

    parsed = []
    real = metrics_log._parse
    monkeypatch.setattr(metrics_log, "_parse", lambda data, engine: parsed.append(len(data)) or real(data, engine))
    # the cut line ended (a bad record: it never parses), three records, and one being written
    added = append(rank0, 100, 3)
    with open(rank0, "a") as f:
        f.write('{"kind": "step", "time_unix": 17')
    got = metrics_log.read_metrics_arrays(rank0, copies=RUNNING)
    cut_line = len('{"kind": "step", "time_unix": 17630') + 1
    assert parsed == [cut_line + added] and got[1] == 2 and got[0]["step"][-3:].tolist() == [100, 101, 102]
    same(got, metrics_log.read_metrics_arrays(rank0))
    assert source_of_copy(rank0) == src  # the rest is under REWRITE_SHARE of the copied part

    # many more records: a new copy, up to the last complete line
    append(rank0, 103, 200)
    parsed.clear()
    got = metrics_log.read_metrics_arrays(rank0, copies=RUNNING)
    assert len(parsed) == 1 and source_of_copy(rank0)[1] == rank0.stat().st_size > src[1]
    same(got, metrics_log.read_metrics_arrays(rank0))

    # records pyarrow refuses (a field changing type): that part alone by the json module
    append(rank0, 303, 2, loss="nan")
    parsed.clear()
    got = metrics_log.read_metrics_arrays(rank0, copies=RUNNING)
    assert len(parsed) == 1 and np.isnan(got[0]["loss"][-2:]).all() and got[0]["step"][-1] == 304
    same(got, metrics_log.read_metrics_arrays(rank0, engine="csv"))

    # the job ended: the whole file's copy, from the part's copy and the rest
    parsed.clear()
    ended = metrics_log.read_metrics_arrays(rank0, copies=columnar.Policy(run_ended=True))
    again = metrics_log.read_metrics_arrays(rank0, copies=columnar.Policy(run_ended=True))
    assert len(parsed) == 1 and source_of_copy(rank0) == columnar.identity(rank0.stat())  # again: the copy
    for t in (ended, again):
        same(t, metrics_log.read_metrics_arrays(rank0, engine="csv"))


def test_a_metrics_file_rewritten_inside_its_copied_part_is_parsed_whole(rank0):
    metrics_log.read_metrics_arrays(rank0, copies=RUNNING)
    end = source_of_copy(rank0)[1]
    text = rank0.read_bytes()
    at = text.rindex(b'"loss": 0.', 0, end) + len(b'"loss": 0.')  # a digit of the last copied loss
    with open(rank0, "r+b") as f:
        f.seek(at)
        f.write(b"%d" % ((int(text[at:at + 1]) + 1) % 10))
    assert columnar.load_prefix(rank0, metrics_log.KIND, rank0.stat()) is None
    same(metrics_log.read_metrics_arrays(rank0, copies=RUNNING), metrics_log.read_metrics_arrays(rank0))
