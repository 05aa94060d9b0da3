"""The pyarrow engine of :mod:`hpclaunch.reports.readers`: monitor CSV logs to numpy columns with no
Python per row.

The log contract (docs/monitor-logs.md) counts a row only if its line ends in a newline and has the
header's cell count; cells never contain commas, quotes or newlines. The caller cuts the file at its
last newline. Every line left is then parsed strictly, multi-threaded, with quoting off (the contract
has no quotes; a stray ``"`` stays in its own line instead of swallowing the next ones). A file with
a malformed line makes the strict parse raise; only then is the file filtered line by line with
numpy (commas counted per line, the lines with the header's count kept) and the rest parsed strictly
again. pyarrow's ``invalid_row_handler`` is not used: a Python callback makes pyarrow parse on one
thread, and cost a read 1.5-2x even on files without a bad line.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# Lines are filtered this many bytes at a time (bounds the filter's temporary arrays).
FILTER_CHUNK = 64 << 20


def whole_rows(buf, skip: int, ncell: int) -> Tuple[bytes, int]:
    """The lines of ``buf`` (bytes up to and including its last newline) after the first ``skip``
    ones that have exactly ``ncell`` cells, joined, and the number of other non-empty lines."""
    a = np.frombuffer(buf, np.uint8)
    view = memoryview(buf).cast("B")
    keep_runs: List[memoryview] = []
    bad = 0
    pos = 0
    while pos < a.size:
        cut = min(a.size, pos + FILTER_CHUNK)
        if cut < a.size:  # end the window at a line end
            last = np.flatnonzero(a[pos:cut] == 10)
            cut = pos + int(last[-1]) + 1 if last.size else a.size
        w = a[pos:cut]
        ends = np.flatnonzero(w == 10) + 1              # one past each line's newline
        starts = np.concatenate([[0], ends[:-1]])
        commas = np.add.reduceat(w == 44, starts, dtype=np.int64) if starts.size else starts
        empty = (ends - starts) == 1                    # a bare newline: skipped, not counted
        if skip:
            k = min(skip, starts.size)
            empty[:k] = True                            # the schema line and the header
            skip -= k
        ok = commas == ncell - 1
        bad += int(np.count_nonzero(~ok & ~empty))
        ok &= ~empty
        # runs of kept lines -> one slice each
        edges = np.flatnonzero(np.diff(np.concatenate([[False], ok, [False]]).astype(np.int8)))
        for s, e in zip(starts[edges[0::2]].tolist(), (ends[edges[1::2] - 1]).tolist()):
            keep_runs.append(view[pos + s: pos + e])
        pos = cut
    return b"".join(keep_runs), bad


def _strict(source, header: Sequence[str], skip: int, types: dict, include: List[str]):
    import pyarrow.csv as pcsv

    return pcsv.read_csv(
        source,
        read_options=pcsv.ReadOptions(skip_rows=skip, column_names=list(header), use_threads=True,
                                      block_size=8 << 20),
        parse_options=pcsv.ParseOptions(quote_char=False),
        convert_options=pcsv.ConvertOptions(column_types=types, include_columns=include, null_values=[""],
                                            strings_can_be_null=True),
    )


def parse(path: str, end: Optional[int], header: Sequence[str], skip: int, numeric: Sequence[str],
          text: Sequence[str], data: Optional[bytes] = None):
    """(rows, {numeric column: float64 array}, {text column: (int32 codes, -1 = empty; values)},
    lines skipped) of the first ``end`` bytes of ``path`` (None: all of it, which ends in a
    newline), or of ``data`` (complete lines) when given. Raises on anything but a cell-count
    mismatch (the caller falls back to the csv module)."""
    import pyarrow as pa

    if len(set(header)) != len(header):  # would confuse column selection; the csv engine copes
        raise ValueError("duplicate column names")
    if data is not None:
        return _parse_buffer(pa.py_buffer(data), header, skip, numeric, text)
    with pa.memory_map(path) as mm:  # the columns returned are copies: the map may close
        return _parse_buffer(mm.read_buffer(end) if end is not None else mm.read_buffer(),
                             header, skip, numeric, text)


def _parse_buffer(buf, header: Sequence[str], skip: int, numeric: Sequence[str], text: Sequence[str]):
    import pyarrow as pa

    present_num = [c for c in numeric if c in header]
    present_txt = [c for c in text if c in header]
    types = {c: pa.float64() for c in present_num}
    types.update({c: pa.dictionary(pa.int32(), pa.string()) for c in present_txt})
    include = present_num + present_txt
    bad = 0
    try:
        tbl = _strict(pa.BufferReader(buf), header, skip, types, include)
    except pa.ArrowInvalid as e:
        if "columns, got" not in str(e):
            raise
        kept, bad = whole_rows(buf, skip, len(header))
        tbl = _strict(pa.BufferReader(pa.py_buffer(kept)), header, 0, types, include)
    n = tbl.num_rows
    num = {c: float_column(tbl.column(c), n) for c in present_num}
    txt = {c: codes_column(tbl.column(c), n) for c in present_txt}
    return n, num, txt, bad


# Arrow arrays to numpy through their buffers: Array.to_numpy would import pandas (pyarrow's
# pandas_compat) when it is installed, 0.3-1 s of a report spent on an import.


def valid_mask(arr) -> np.ndarray:
    """Bool per element of an Arrow array: not null."""
    n = len(arr)
    if not arr.null_count:
        return np.ones(n, bool)
    bits = np.frombuffer(arr.buffers()[0], np.uint8)
    return np.unpackbits(bits, bitorder="little", count=arr.offset + n)[arr.offset:].astype(bool)


def float_chunk(arr) -> np.ndarray:
    """A float64 Arrow array as numpy, NaN for nulls (a view of Arrow memory when it has none)."""
    n = len(arr)
    buf = arr.buffers()[1]
    if n == 0 or buf is None:
        return np.full(n, np.nan)
    vals = np.frombuffer(buf, np.float64, count=n, offset=arr.offset * 8)
    return np.where(valid_mask(arr), vals, np.nan) if arr.null_count else vals


def string_list(arr) -> List[str]:
    """A (small) string Arrow array as a list, "" for nulls (Array.to_pylist imports pandas too)."""
    n = len(arr)
    if n == 0:
        return []
    offs = np.frombuffer(arr.buffers()[1], np.int32, count=n + 1, offset=arr.offset * 4).tolist()
    data = arr.buffers()[2]
    raw = data.to_pybytes() if data is not None else b""
    ok = valid_mask(arr).tolist()
    return [raw[offs[i]:offs[i + 1]].decode("utf-8", "replace") if ok[i] else "" for i in range(n)]


def float_column(col, n: int) -> np.ndarray:
    """One float64 array (NaN for empty cells) of a chunked column, copied out of Arrow memory."""
    out = np.empty(n)
    a = 0
    for ch in col.chunks:
        b = a + len(ch)
        out[a:b] = float_chunk(ch)
        a = b
    return out


def codes_column(col, n: int) -> Tuple[np.ndarray, List[str]]:
    """Dictionary chunks -> (int32 codes into one value list, -1 = empty cell; the values)."""
    values: Dict[str, int] = {}
    out = np.empty(n, np.int32)
    a = 0
    for ch in col.chunks:
        b = a + len(ch)
        dic = string_list(ch.dictionary)
        remap = np.array([-1 if not v else values.setdefault(v, len(values)) for v in dic] + [-1], np.int32)
        idx = ch.indices
        raw = np.frombuffer(idx.buffers()[1], np.int32, count=len(idx), offset=idx.offset * 4) \
            if len(idx) else np.empty(0, np.int32)
        if idx.null_count:
            raw = np.where(valid_mask(idx), raw, len(dic))
        out[a:b] = remap[raw]
        a = b
    return out, list(values)
