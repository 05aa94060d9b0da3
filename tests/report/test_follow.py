"""Following logs as they grow (reports/follow.py): pieces read one after another make the same rows as
one read of the whole file, each read parses only what was appended, and a truncated or replaced
file is read again from its start."""
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import GpuSpec, HostSpec, write_run  # noqa: E402

from hpclaunch.monitors import schema  # noqa: E402
from hpclaunch.reports import follow, readers  # noqa: E402

ENGINES = ["csv"] + (["pyarrow"] if readers.have_pyarrow() else [])


def _pieces(data: bytes, cuts):
    """data cut at these fractions of its length: lines split mid-row, the header split too."""
    at = [0] + [int(len(data) * c) for c in cuts] + [len(data)]
    return [data[a:b] for a, b in zip(at, at[1:])]


@pytest.mark.parametrize("engine", ENGINES)
def test_appended_pieces_read_as_the_whole_file(tmp_path, engine):
    write_run(tmp_path / "src", [GpuSpec("n1", 0), GpuSpec("n1", 1)], hosts=[HostSpec("n1")], duration=300)
    whole = readers.read_gpu_log(tmp_path / "src" / schema.MONITOR_DIR / schema.gpu_file("n1"), engine)
    data = (tmp_path / "src" / schema.MONITOR_DIR / schema.gpu_file("n1")).read_bytes()
    grown = tmp_path / "n1.gpu.csv"
    grown.write_bytes(b"")
    f = follow.CsvFollower(grown, "gpu", engine)
    times, power, reads = [], [], 0
    for piece in _pieces(data, [0.0005, 0.3, 0.3001, 0.71]):   # the first piece ends inside the header
        with open(grown, "ab") as out:
            out.write(piece)
        table, restarted = f.read()
        assert not restarted
        if table is not None:
            reads += 1
            times.append(table.col("time_unix"))
            power.append(table.col("power_w"))
            assert f.tail.offset == data[:os.path.getsize(grown)].rfind(b"\n") + 1   # up to the last whole line
    assert reads == 3   # the header-only piece and the piece inside one row gave nothing
    np.testing.assert_array_equal(np.concatenate(times), whole.col("time_unix"))
    np.testing.assert_array_equal(np.concatenate(power), whole.col("power_w"))
    assert f.read() == (None, False)   # nothing new: nothing parsed


def test_a_read_parses_only_what_was_appended(tmp_path, monkeypatch):
    write_run(tmp_path, [GpuSpec("n1", 0)], duration=100)
    path = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    f = follow.CsvFollower(path, "gpu")
    assert f.read()[0].n == 101
    parsed = []
    real = readers.read_rows
    monkeypatch.setattr(readers, "read_rows", lambda p, data, *a, **k: parsed.append(data) or real(p, data, *a, **k))
    lines = path.read_text().splitlines(keepends=True)
    with open(path, "a") as out:
        out.write(lines[-1] + lines[-1][:10])   # one more row and the start of another
    table, _ = f.read()
    assert table.n == 1 and parsed == [lines[-1].encode()]


def test_a_truncated_or_replaced_file_is_read_again(tmp_path):
    write_run(tmp_path, [GpuSpec("n1", 0)], duration=50)
    path = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    f = follow.CsvFollower(path, "gpu")
    assert f.read()[0].n == 51
    data = path.read_bytes()
    path.write_bytes(data[: data.index(b"\n", data.index(b"\n") + 1) + 1])   # schema line and header only
    assert f.read() == (None, True)
    os.replace(_copy(tmp_path, data), path)                                  # another file (inode)
    table, restarted = f.read()
    assert restarted and table.n == 51


def _copy(tmp_path, data):
    p = tmp_path / "copy.csv"
    p.write_bytes(data)
    return p


def test_metrics_records_come_once_and_only_when_whole(tmp_path):
    path = tmp_path / "rank0.jsonl"
    rec = {"kind": "step", "rank": 0, "step": 1, "loss": 2.0}
    path.write_text(json.dumps({"kind": "header"}) + "\n" + json.dumps(rec)[:12])
    f = follow.JsonlFollower(path)
    assert f.read() == ([{"kind": "header"}], 0, False)
    with open(path, "a") as out:
        out.write(json.dumps(rec)[12:] + "\nnot json\n")
    assert f.read() == ([rec], 1, False)
    assert f.read() == ([], 0, False)


def test_a_bounded_read_takes_a_huge_log_in_several_reads(tmp_path):
    write_run(tmp_path, [GpuSpec("n1", 0)], duration=2000)
    path = tmp_path / schema.MONITOR_DIR / schema.gpu_file("n1")
    f = follow.CsvFollower(path, "gpu", max_read=16 << 10)
    total = reads = 0
    while True:
        table, _ = f.read()
        if table is None:
            break
        total, reads = total + table.n, reads + 1
    assert total == 2001 and reads >= path.stat().st_size // (16 << 10) > 5, (total, reads)
