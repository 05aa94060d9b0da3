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


@pytest.mark.parametrize("at", ["mid-line", "line start", "past the last newline"])
def test_a_tail_followed_from_its_end_starts_at_a_line_and_keeps_the_head(tmp_path, at):
    path = tmp_path / "log.csv"
    lines = [b"# schema=x\n", b"a,b\n"] + [b"%d,%d\n" % (i, i * i) for i in range(1000)]
    data = b"".join(lines)
    if at == "past the last newline":
        data += b"9" * 100   # a line being written, begun before the last ``start`` bytes
    path.write_bytes(data)
    start = {"mid-line": 1000, "line start": len(b"".join(lines[-50:])), "past the last newline": 50}[at]
    tail = follow.Tail(path, start=start, keep_head=True)
    got, restarted = tail.read()
    first = len(data) - start
    expect_at = data.index(b"\n", first - 1) + 1 if b"\n" in data[first - 1:] else len(data)
    assert not restarted and tail.skipped == expect_at and tail.head == data[:follow.HEAD_BYTES]
    assert got == data[expect_at:data.rfind(b"\n") + 1]
    if at == "line start":
        assert got == b"".join(lines[-50:])
    with open(path, "ab") as f:
        f.write(b"\n1,1\n")
    assert tail.read() == (b"\n1,1\n", False)   # a line begun before ``start`` (being written then) is not read


def test_a_tail_whose_start_falls_in_a_line_longer_than_a_read_finds_its_end(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"{}\n" + b"x" * 5000 + b"\n" + b"{\"a\": 1}\n")
    tail = follow.Tail(path, max_read=1000, start=4000)
    assert tail.read() == (b"{\"a\": 1}\n", False) and tail.skipped == 5004


@pytest.mark.parametrize("engine", ENGINES)
def test_many_files_parsed_together_are_their_rows_read_one_by_one(tmp_path, engine):
    """The dashboard parses a large job's files of one header together (CsvFollower.take, then parse)."""
    write_run(tmp_path, [GpuSpec(f"n{h}", i, a=100 + 10 * h + i) for h in range(3) for i in range(2)], duration=200)
    paths = [tmp_path / schema.MONITOR_DIR / schema.gpu_file(f"n{h}") for h in range(3)]
    alone = [follow.CsvFollower(p, "gpu", engine, start=3000 if h else None).read()[0]
             for h, p in enumerate(paths)]
    together = [follow.CsvFollower(p, "gpu", engine, start=3000 if h else None) for h, p in enumerate(paths)]
    taken = [f.take() for f in together]
    assert taken[0][1] == 2 and taken[1][1] == taken[2][1] == 0   # schema line and header: in the first file's lines
    assert all(f.header == list(schema.GPU_COLUMNS) for f in together)
    table = together[0].parse([d for d, _, _ in taken], [k for _, k, _ in taken])
    for col in ("time_unix", "power_w", "gpu_index"):
        np.testing.assert_array_equal(table.col(col), np.concatenate([t.col(col) for t in alone]))
    assert table.n == 201 * 2 + sum(t.n for t in alone[1:])
    codes, names = table.text["host"]
    assert [names[c] for c in codes[[0, 402, -1]]] == ["n0", "n1", "n2"]
