"""A running job's logs read by parts (reports/columnar.py ``Growing``, issue 20): a report copies the
first part of each large log, and a later one reads that part from the copy and parses only the lines
appended since. Whatever it read from, a table equals the plain parse of the file as it is now, and a
copy of a part the file no longer begins with is never used."""
import dataclasses
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_columnar_copies import copies, ended_run  # noqa: E402

from hpclaunch.reports import build_report, columnar, readers, table  # noqa: E402

pytest.importorskip("pyarrow")
RUNNING = columnar.Policy(run_ended=False)


def same(a: readers.Table, b: readers.Table) -> None:
    assert (a.n, a.skipped_rows, a.schema_line, a.missing_columns) == (b.n, b.skipped_rows, b.schema_line,
                                                                     b.missing_columns)
    assert sorted(a.num) == sorted(b.num) and sorted(a.text) == sorted(b.text)
    for c in a.num:
        np.testing.assert_array_equal(a.num[c], b.num[c], err_msg=c)
    for c in a.text:
        assert a.text_values(c).tolist() == b.text_values(c).tolist(), c


def source_of_copy(path):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with pa.memory_map(str(columnar.copy_path(path))) as mm:
        meta = ipc.open_file(mm).schema.metadata
    return json.loads(meta[columnar.META_KEY])["source"]


def append(path, sweeps: int, shift: float, error: str = "") -> int:
    """The log's last sweep of rows again, ``shift`` s later per repeat, at 300 W, ``error`` in its
    error cells (a text value not seen before). Returns the bytes appended."""
    header = path.read_text().splitlines()[1].split(",")
    lines = [ln for ln in path.read_text().splitlines() if ln.count(",") == len(header) - 1]
    t_col, e_col, j_col = header.index("time_unix"), header.index("error"), header.index("energy_mj")
    last_t = lines[-1].split(",")[t_col]
    sweep = [ln.split(",") for ln in lines if ln.split(",")[t_col] == last_t]
    out = []
    for k in range(1, sweeps + 1):
        for cells in sweep:
            cells = list(cells)
            cells[t_col] = f"{float(last_t) + k * shift:.3f}"
            cells[e_col] = error
            if cells[j_col]:  # 300 W more
                cells[j_col] = repr(float(cells[j_col]) + k * shift * 300_000)
            out.append(",".join(cells) + "\n")
    text = "".join(out)
    with open(path, "a") as f:
        f.write(text)
    return len(text.encode())


@pytest.fixture
def log(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "MIN_PREFIX", 4096)  # the synthetic logs are tens of KB
    ended_run(tmp_path, ended=False, partial_last_line=False)
    return tmp_path / "monitor" / "n1.gpu.csv"


def test_a_running_jobs_log_is_read_from_its_copied_part_and_the_lines_after(log, monkeypatch):
    plain = readers.read_gpu_log(log)
    same(readers.read_gpu_log(log, copies=RUNNING), plain)
    src = source_of_copy(log)
    assert src[:3] == ["prefix", log.stat().st_size, log.stat().st_ino]

    tails = []
    real = readers.read_rows

    def spy(path, data, *a, **k):
        tails.append(len(data))
        return real(path, data, *a, **k)
    monkeypatch.setattr(readers, "read_rows", spy)
    # a few lines more, with a new text value, and a line being written (cut): the copy stays
    added = append(log, 3, 1.0, error="GPU is lost")
    with open(log, "a") as f:
        f.write("1700000000.5,n1,0,GPU-")
    got = readers.read_gpu_log(log, copies=RUNNING)
    same(got, readers.read_gpu_log(log))
    assert tails == [added] and got.skipped_rows >= 1 and "GPU is lost" in got.text_values("error").tolist()
    assert source_of_copy(log) == src  # the rest is under REWRITE_SHARE of the copied part

    # the writer ends the cut line; then many more lines: a new copy, up to the last complete line
    with open(log, "a") as f:
        f.write("\n")
    append(log, 400, 0.5, error="later")
    tails.clear()
    same(readers.read_gpu_log(log, copies=RUNNING), readers.read_gpu_log(log))
    assert len(tails) == 1 and source_of_copy(log)[1] == log.stat().st_size > src[1]
    tails.clear()
    same(readers.read_gpu_log(log, copies=RUNNING), readers.read_gpu_log(log))
    assert tails == []  # nothing appended: all of it from the copy
    # text values the copied part has, in another order, and a new one: one dictionary again
    append(log, 2, 1.0, error="later")
    append(log, 2, 1.0, error="newest")
    got = readers.read_gpu_log(log, copies=RUNNING)
    same(got, readers.read_gpu_log(log))
    assert len(tails) == 1 and got.text_values("error").tolist()[-8:] == ["later"] * 4 + ["newest"] * 4
    # the job ended: the whole file's copy (its rows grouped by GPU) from the part's copy and the rest
    tails.clear()
    ended = readers.read_gpu_log(log, copies=columnar.Policy(run_ended=True))
    assert len(tails) == 1 and source_of_copy(log) == columnar.identity(log.stat())
    again = readers.read_gpu_log(log, copies=columnar.Policy(run_ended=True))
    assert len(tails) == 1  # read from the whole file's copy
    plain_now = readers.read_gpu_log(log)
    order = np.lexsort([plain_now.col("gpu_index"), plain_now.text["host"][0]])  # by host, then GPU
    for t in (ended, again):
        for c in plain_now.num:
            np.testing.assert_array_equal(t.num[c], plain_now.num[c][order], err_msg=c)
        assert t.text_values("error").tolist() == plain_now.text_values("error")[order].tolist()
        assert t.skipped_rows == plain_now.skipped_rows and t.n == plain_now.n


@pytest.mark.parametrize("change", ["rewritten inside the copied part", "replaced", "truncated"])
def test_a_copy_of_a_part_the_log_no_longer_begins_with_is_not_used(log, change):
    readers.read_gpu_log(log, copies=RUNNING)
    end = source_of_copy(log)[1]
    if change == "replaced":
        text = log.read_bytes()
        log.unlink()
        log.write_bytes(text.replace(b",0,", b",1,", 1))  # a new file (its inode may be the old one's)
    elif change == "truncated":
        with open(log, "r+b") as f:
            f.truncate(end - 10)
    else:  # the same inode and length, other bytes just before the copied part's end
        text = log.read_bytes()
        at = next(i for i in range(end - 100, end) if text[i:i + 1].isdigit())
        with open(log, "r+b") as f:  # one digit of a value, another
            f.seek(at)
            f.write(b"%d" % ((int(text[at:at + 1]) + 1) % 10))
    assert columnar.load_prefix(log, readers_gpu_kind(), log.stat()) is None
    same(readers.read_gpu_log(log, copies=RUNNING), readers.read_gpu_log(log))


def readers_gpu_kind():
    return json.dumps(["csv", readers.TABLE_COPY_FORMAT, "hpclaunch.monitor.gpu/1", list(readers.GPU_NUMERIC),
                       list(readers.GPU_TEXT), list(readers.GPU_OPTIONAL), ["file order"]])


def test_a_running_jobs_report_says_what_a_report_without_copies_says(log, tmp_path):
    run = tmp_path
    first = build_report(run).data
    assert any(p.endswith(".gpu.csv.arrow") for p in copies(run))
    for p in (run / "monitor").glob("*.gpu.csv"):
        append(p, 50, 1.0)
    second = build_report(run).data
    for p in (run / "monitor" / ".columnar").glob("*"):
        p.unlink()
    third = build_report(run, engine="pyarrow").data  # the CSVs only
    assert second["energy_j"] == third["energy_j"] and second["gpus"] == third["gpus"]
    assert second["energy_j"]["gpu"] > first["energy_j"]["gpu"]


def test_a_folder_it_cannot_write_gets_no_copy_nor_the_work_of_one(log, monkeypatch):
    (log.parent / columnar.SUBDIR).write_text("not a directory")
    made = []
    real = table.copy_of_table
    monkeypatch.setattr(table, "copy_of_table", lambda *a: made.append(1) or real(*a))
    same(readers.read_gpu_log(log, copies=RUNNING), readers.read_gpu_log(log))
    assert made == [] and (log.parent / columnar.SUBDIR).read_text() == "not a directory"


def test_a_small_running_log_is_parsed_whole_without_a_copy(tmp_path, monkeypatch):
    ended_run(tmp_path, ended=False)
    assert os.path.getsize(tmp_path / "monitor" / "n1.gpu.csv") < columnar.MIN_PREFIX
    tails = []  # nor a read of its tail for a part that will not be copied
    real = readers._growing

    def spied(*a):
        g = real(*a)
        return dataclasses.replace(g, complete=lambda: tails.append(1) or g.complete())
    monkeypatch.setattr(readers, "_growing", spied)
    build_report(tmp_path)
    assert copies(tmp_path) == [] and tails == []
