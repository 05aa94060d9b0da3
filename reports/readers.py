"""Readers for the monitor log contract (``monitors/schema.py``) and JSON lines (the metrics files: reports/metrics_log.py).

Used by the reports. A CSV log is read into a :class:`Table`: numeric columns become float64
numpy arrays (an empty cell — "not measured" — becomes NaN, never 0), text columns become
dictionary codes (int32, -1 = empty) plus the list of distinct values, which keeps 10 M-row
logs cheap.

Two engines, same result:

* ``"pyarrow"`` (default when pyarrow is importable): strict multi-threaded C++ parser, no Python
  per row; a file with lines whose cell count differs from the header's is filtered with numpy
  first (``reports/csv_arrow.py``). Measured in ``bench/report/bench_report.py``.
* ``"csv"``: the standard library's csv module; tolerant of anything (repeated schema/header
  lines after a daemon restart appended to the same file, unparsable cells). Used when pyarrow
  is missing or refuses a file.

Both engines count a row only if its line ends in a newline. A killed writer leaves its last
line unterminated, and a cut inside the last cell keeps the cell count right while the value is
wrong (``monitor_rss_mib`` 17.53 read as 17), so the cell count alone cannot catch it: whatever
follows the file's last newline is dropped and counted in ``skipped_rows``. The JSON-lines
readers apply the same rule.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from hpclaunch.monitors import schema
from hpclaunch.reports import columnar, csv_arrow, table
from hpclaunch.reports.table import TABLE_COPY_FORMAT, Table

# Columns the reports read (others are ignored; a newer schema may add columns at the end).
GPU_NUMERIC = (
    "time_unix", "gpu_index", "power_w", "energy_mj", "temp_c", "mem_temp_c", "mem_used_mib",
    "mem_total_mib", "util_pct", "power_limit_w", "throttle_reasons", "slowdown_temp_c",
    "viol_power_ns", "viol_thermal_ns", "ecc_dbe_total",
)
GPU_TEXT = ("host", "gpu_uuid", "ranks", "error")
# Appended later (per-reason throttle time): optional, so files written before them read the same
# way, with no warning and no all-NaN columns materialised (10 M-row logs).
GPU_OPTIONAL = tuple(schema.THROTTLE_COUNTER_COLUMNS.values())
HOST_NUMERIC = (
    "time_unix", "cpu_pct", "mem_used_mib", "mem_total_mib", "load1", "rapl_energy_uj",
    "cpu_temp_c", "monitor_cpu_s", "monitor_rss_mib",
)
HOST_TEXT = ("host",)
TRACE_NUMERIC = ("time_unix", "gpu_index", "power_w")
TRACE_TEXT = ("host",)


def have_pyarrow() -> bool:
    try:
        import pyarrow.csv  # noqa: F401
        return True
    except ImportError:
        return False


def complete_end(path: str, chunk: int = 1 << 16) -> Tuple[int, int, bool]:
    """(size, end, partial) of a file: ``end`` = bytes up to and including its last newline,
    ``partial`` = something other than whitespace follows it (a killed writer's cut line)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return 0, 0, False
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return size, size, False
        pos = size
        tail = b""
        while pos > 0:  # lines are short: one chunk back is almost always enough
            start = max(0, pos - chunk)
            f.seek(start)
            tail = f.read(pos - start) + tail
            cut = tail.rfind(b"\n", 0, pos - start)
            if cut >= 0:
                return size, start + cut + 1, bool(tail[cut + 1:].strip())
            pos = start
        return size, 0, bool(tail.strip())


def read_range(path, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` of a file (the part of a growing log after its copied part)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, end - start, start)
    finally:
        os.close(fd)


def _read_head(path: str) -> Tuple[Optional[str], Optional[List[str]], int]:
    with open(path, "r", newline="", errors="replace") as f:
        return head_of(f)


def without_bom(lines):
    """The lines, the first without a UTF-8 byte-order mark (an editor's, a Windows tool's): with it
    the schema line was no comment and the file's data was lost."""
    it = iter(lines)
    for first in it:
        return itertools.chain((first[1:] if first.startswith("\ufeff") else first,), it)
    return it


def head_of(lines) -> Tuple[Optional[str], Optional[List[str]], int]:
    """(schema line, header cells, number of leading lines to skip) of a contract CSV's first lines.

    Only newline-terminated lines count: a header cut by a killed writer is no header."""
    schema_line = None
    skip = 0
    for line in without_bom(lines):
        if not line.endswith("\n"):
            break
        skip += 1
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            if s[1:].strip().startswith("schema=") and schema_line is None:
                schema_line = s[1:].strip()[len("schema="):]
            continue
        return schema_line, next(csv.reader([s])), skip
    return schema_line, None, skip


def _check_schema(t: Table, expected: str) -> None:
    if t.schema_line is None:
        t.warnings.append(f"{t.path}: no '# schema=' line; assuming {expected}")
        return
    name, _, ver = t.schema_line.partition("/")
    ename, _, ever = expected.partition("/")
    if name != ename:
        t.warnings.append(f"{t.path}: schema {t.schema_line!r}, expected {expected!r}")
    elif ver != ever:
        t.warnings.append(f"{t.path}: schema version {ver} (reader knows {ever}); reading known columns")


def read_table(path, expected_schema: str, numeric: Sequence[str], text: Sequence[str],
               engine: str = "auto", optional: Sequence[str] = (),
               copies: Optional[columnar.Policy] = None, group_by: Sequence[str] = (),
               upto: Optional[int] = None) -> Table:
    """Read one contract CSV. ``engine``: "auto" | "pyarrow" | "csv". ``optional``: numeric
    columns read when the header has them, else left out of ``num`` (``col()`` gives NaN).
    ``copies``: with engine "auto", read the file's columnar copy when it has a valid one, and write
    one when the policy allows (reports/columnar.py); None: the CSV only. A copy holds the rows
    grouped by the ``group_by`` columns (a stable sort: file order within a group), so a table read
    from a copy has its rows in that order, one read from the CSV in file order. ``upto``: only the
    file's first ``upto`` bytes (a line's end: what an earlier read of a growing log saw), as a read
    of the log while it runs (no copy of the whole file is made of them)."""
    path = str(path)
    if upto is not None and complete_end(path)[1] <= upto:
        upto = None   # nothing after those bytes but a line being written: the file as it is (its cut counted)
    if copies is None or engine != "auto":
        return _read_csv_table(path, expected_schema, numeric, text, engine, optional, upto=upto)
    if upto is not None:
        copies = columnar.Policy(False)
    def kind(order):
        return copy_kind(expected_schema, numeric, text, optional, order)

    def from_copy(arrays, data):
        return table.table_of_copy(path, arrays, data)

    return columnar.through(path, kind(group_by), copies,
                            lambda: _read_csv_table(path, expected_schema, numeric, text, engine, optional, upto=upto),
                            lambda t: table.copy_of_table(t, group_by), from_copy,
                            _growing(path, kind(["file order"]), expected_schema, numeric, text, engine, optional,
                                     from_copy, upto))


def copy_kind(expected_schema: str, numeric, text, optional, order) -> str:
    """What a table's columnar copy says it holds: the reader and its columns, the rows' order."""
    return json.dumps(["csv", TABLE_COPY_FORMAT, expected_schema, list(numeric), list(text), list(optional),
                       list(order)])


def _growing(path: str, kind: str, expected_schema: str, numeric, text, engine, optional, from_copy,
             upto: Optional[int] = None):
    """A CSV log read by parts while its job runs (columnar.Growing): rows in file order (``upto``:
    those of its first ``upto`` bytes)."""
    def complete():
        size, end, partial = complete_end(path)
        return (end, int(partial)) if upto is None or end <= upto else (upto, 0)

    def parse(start, end):
        if start == 0:
            return _read_csv_table(path, expected_schema, numeric, text, engine, optional, upto=end)
        _, header, _ = _read_head(path)
        return read_rows(path, read_range(path, start, end), header or [], 0, numeric, text, engine, optional)

    def finish(t, cut):
        t.skipped_rows += cut
        return t

    return columnar.Growing(kind, complete, parse, table.concat, finish, lambda t: table.copy_of_table(t, ()),
                            from_copy)


def _read_csv_table(path: str, expected_schema: str, numeric: Sequence[str], text: Sequence[str],
                    engine: str, optional: Sequence[str], upto: Optional[int] = None) -> Table:
    """The file's rows; ``upto``: those of its first ``upto`` bytes (a line's end), nothing said of
    what follows them."""
    t = Table(path=path)
    if upto is None:
        size, end, partial = complete_end(path)
    else:
        size, end, partial = None, upto, False
    schema_line, header, skip = _read_head(path)
    t.schema_line = schema_line
    _check_schema(t, expected_schema)
    twice = [f"{c} ({n}x)" for c, n in Counter(header or ()).items() if n > 1]
    if twice:  # docs/monitor-logs.md: the first of each is read
        t.warnings.append(f"{path}: the header names a column more than once: {', '.join(twice[:5])}"
                          f"{' and others' if len(twice) > 5 else ''}; the first of each is read, the others ignored")
    if header is None:
        t.warnings.append(f"{path}: empty file (no header)")
        t.engine = "none"
        for c in numeric:
            t.num[c] = np.empty(0)
        for c in text:
            t.text[c] = (np.empty(0, np.int32), [])
        return t
    _parse_rows(t, header, skip, numeric, text, engine, optional, end=None if end == size else end)
    t.skipped_rows += partial
    return t


def read_rows(path, data: bytes, header: List[str], skip: int, numeric: Sequence[str], text: Sequence[str],
              engine: str = "auto", optional: Sequence[str] = ()) -> Table:
    """The rows in ``data``, complete lines of a contract CSV whose header is ``header`` (its first
    ``skip`` lines are not rows): what a reader following a growing log (follow.py) parses each time."""
    t = Table(path=str(path))
    _parse_rows(t, header, skip, numeric, text, engine, optional, data=data)
    return t


def _parse_rows(t: Table, header, skip, numeric, text, engine, optional, end=None, data=None) -> None:
    """The file's rows (or those of ``data``) into ``t``: pyarrow, else the csv module."""
    t.missing_columns = [c for c in (*numeric, *text) if c not in header]
    numeric = (*numeric, *(c for c in optional if c in header))
    if engine == "auto":
        engine = "pyarrow" if have_pyarrow() else "csv"
    if engine == "pyarrow":
        try:
            t.n, t.num, t.text, t.skipped_rows = csv_arrow.parse(t.path, end, header, skip, numeric, text, data)
            _absent_as_missing(t, numeric, text)
            t.engine = "pyarrow"
            return
        except Exception as e:  # noqa: BLE001 - any refusal: fall back to the tolerant reader
            t.num.clear()
            t.text.clear()
            t.skipped_rows = 0
            t.engine = f"csv (pyarrow refused: {type(e).__name__})"
    else:
        t.engine = "csv"
    # as the file is opened below (newline=""): lines split where open() splits them
    _read_csvmod(t, header, numeric, text,
                 None if data is None else io.StringIO(data.decode("utf-8", "replace"), newline=""))


def _absent_as_missing(t: Table, numeric, text) -> None:
    for c in numeric:
        if c not in t.num:
            t.num[c] = np.full(t.n, np.nan)
    for c in text:
        if c not in t.text:
            t.text[c] = (np.full(t.n, -1, np.int32), [])


def _read_csvmod(t: Table, header, numeric, text, lines=None) -> None:
    """The csv module over the file (or ``lines``)."""
    ncell = len(header)
    idx_num = [(c, header.index(c)) for c in numeric if c in header]
    idx_txt = [(c, header.index(c)) for c in text if c in header]
    num_vals: Dict[str, list] = {c: [] for c, _ in idx_num}
    txt_vals: Dict[str, list] = {c: [] for c, _ in idx_txt}
    skipped = 0
    bad_cells = 0
    nan = math.nan
    with (open(t.path, "r", newline="", errors="replace") if lines is None else nullcontext(lines)) as f:
        # only newline-terminated lines (the unterminated last one is counted by the caller)
        # no quoting: the contract has no quotes (as the pyarrow engine reads it)
        for row in csv.reader((ln for ln in without_bom(f) if ln.endswith("\n")), quoting=csv.QUOTE_NONE):
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if row[0].lstrip().startswith("#"):
                continue
            if row == header:  # a restarted writer appended a new header
                continue
            if len(row) != ncell:
                skipped += 1
                continue
            try:
                float(row[idx_num[0][1]]) if idx_num else None
            except ValueError:
                skipped += 1
                continue
            for c, i in idx_num:
                v = row[i]
                if v == "":
                    num_vals[c].append(nan)
                else:
                    try:
                        num_vals[c].append(float(v))
                    except ValueError:
                        bad_cells += 1
                        num_vals[c].append(nan)
            for c, i in idx_txt:
                txt_vals[c].append(row[i])
    t.skipped_rows = skipped
    if bad_cells:
        t.warnings.append(f"{t.path}: {bad_cells} unparsable numeric cells read as not measured")
    t.n = len(next(iter(num_vals.values()))) if num_vals else (
        len(next(iter(txt_vals.values()))) if txt_vals else 0)
    for c in numeric:
        t.num[c] = np.asarray(num_vals[c], dtype=np.float64) if c in num_vals else np.full(t.n, np.nan)
    for c in text:
        if c in txt_vals:
            dic: Dict[str, int] = {}
            codes = np.fromiter((-1 if v == "" else dic.setdefault(v, len(dic)) for v in txt_vals[c]),
                                dtype=np.int32, count=t.n)
            t.text[c] = (codes, list(dic))
        else:
            t.text[c] = (np.full(t.n, -1, np.int32), [])


def read_gpu_log(path, engine="auto", copies: Optional[columnar.Policy] = None,
                 upto: Optional[int] = None) -> Table:
    # a copy holds each GPU's rows together: what the report's indexing would otherwise do each time
    return read_table(path, schema.GPU_SCHEMA, GPU_NUMERIC, GPU_TEXT, engine, GPU_OPTIONAL, copies,
                      group_by=GPU_ORDER, upto=upto)


GPU_ORDER = ("host", "gpu_index")


def copy_data(path, kind: str) -> Optional[dict]:
    """The stored results (rows, bounds, text values...) of a "gpu" or "host" log's valid columnar copy,
    without reading its columns; None when it has none."""
    if kind == "gpu":
        return columnar.description(path, copy_kind(schema.GPU_SCHEMA, GPU_NUMERIC, GPU_TEXT, GPU_OPTIONAL, GPU_ORDER))
    return columnar.description(path, copy_kind(schema.HOST_SCHEMA, HOST_NUMERIC, HOST_TEXT, (), ()))


def read_host_log(path, engine="auto", copies: Optional[columnar.Policy] = None,
                  upto: Optional[int] = None) -> Table:
    return read_table(path, schema.HOST_SCHEMA, HOST_NUMERIC, HOST_TEXT, engine, copies=copies, upto=upto)


def read_power_trace(path, engine="auto") -> Table:
    return read_table(path, schema.POWER_TRACE_SCHEMA, TRACE_NUMERIC, TRACE_TEXT, engine)


def monitor_files(run_dir) -> Dict[str, List[Path]]:
    """Monitor files by kind ("gpu", "host", "events", "power_trace"), sorted by name.

    Every ``*.gpu.csv`` is read, including rotated/copied ones (``node1.gpu.csv.1`` is not matched;
    ``node1.part2.gpu.csv`` is): duplicates are removed later on (host, GPU, time).
    """
    mon = Path(run_dir) / schema.MONITOR_DIR
    out: Dict[str, List[Path]] = {"gpu": [], "host": [], "events": [], "power_trace": []}
    if not mon.is_dir():
        return out
    for p in sorted(mon.iterdir(), key=lambda p: p.name):   # by name: Path's own order costs 1.5 s for 10,000
        n = p.name
        if n.endswith(".gpu.csv"):
            out["gpu"].append(p)
        elif n.endswith(".host.csv"):
            out["host"].append(p)
        elif n.endswith(".events.jsonl"):
            out["events"].append(p)
        elif n.endswith(".power_trace.csv"):
            out["power_trace"].append(p)
    return out


def read_jsonl(path) -> Tuple[List[dict], int]:
    """JSON lines; returns (records, number of lines skipped: unparsable, or the unterminated last
    line of a killed or still-running writer, which is skipped even if it parses)."""
    with open(path, "r", errors="replace") as f:
        return parse_jsonl(f)


# json.loads's own scanner (the C one), called on a line that starts with "{": loads() without its two
# Python frames and two regex matches a line, a third of a large job's 65,536 metrics lines' parse
_scan = json.JSONDecoder().scan_once


def _loads(line: str):
    """json.loads(line), exactly: an object line is scanned at once, whitespace after it allowed."""
    if line[:1] == "{":
        try:
            obj, end = _scan(line, 0)
        except StopIteration:
            raise ValueError("not JSON") from None
        if end == len(line) or not line[end:].strip(" \t\n\r"):
            return obj
        raise ValueError("extra data after the JSON value")
    return json.loads(line)


def parse_jsonl(lines) -> Tuple[List[dict], int]:
    """read_jsonl over lines (each with its newline)."""
    recs: List[dict] = []
    bad = 0
    loads = _loads
    for line in without_bom(lines):
        if not line.strip():
            continue
        if not line.endswith("\n"):
            bad += 1
            continue
        try:
            r = loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(r, dict):
            recs.append(r)
        else:
            bad += 1
    return recs, bad


def metrics_files(run_dir) -> List[Path]:
    d = Path(run_dir) / "metrics"
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if p.name.startswith("rank") and p.name.endswith(".jsonl")),
                  key=lambda p: p.name)
