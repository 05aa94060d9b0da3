"""A monitor log read into columns (:class:`Table`), and what its columnar copy holds.

Shared by the readers (readers.py), which make tables from CSV text, and by the copies of them
(columnar.py): a table as a copy's arrays and small results, a table again from those, and two
tables of one file's consecutive parts made one, as a log still being written is read (its
earlier part from a copy, the lines appended since parsed).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

@dataclass
class Table:
    """One log file (or several concatenated): columns as numpy arrays."""

    path: str
    n: int = 0
    num: Dict[str, np.ndarray] = field(default_factory=dict)
    # text column -> (codes int32 with -1 for empty, dictionary list)
    text: Dict[str, Tuple[np.ndarray, List[str]]] = field(default_factory=dict)
    schema_line: Optional[str] = None
    missing_columns: List[str] = field(default_factory=list)
    skipped_rows: int = 0
    engine: str = ""
    warnings: List[str] = field(default_factory=list)
    # (min, max) of float columns, NaN ignored (None: all missing), where known: a table read from a
    # copy has them (computed once, when the copy was written), so the plausibility checks
    # (reports/plausible.py) skip columns that cannot hold what they look for.
    bounds: Dict[str, Tuple[Optional[float], Optional[float]]] = field(default_factory=dict)

    def col(self, name: str) -> np.ndarray:
        """Numeric column; all-NaN if the file lacks it."""
        a = self.num.get(name)
        if a is None:
            a = np.full(self.n, np.nan)
        return a

    def text_values(self, name: str) -> np.ndarray:
        """Text column decoded to an object array ('' for empty); for small tables / tests."""
        codes, dic = self.text.get(name, (np.full(self.n, -1, np.int32), []))
        lut = np.array(list(dic) + [""], dtype=object)
        return lut[codes]


# What a table's copy holds; 2: with its float columns' bounds. A copy of another format is rewritten.
TABLE_COPY_FORMAT = 2


# A copy holds the warnings with the file's path cut out: the run directory may have moved since.
_PATH = "\0"


def copy_of_table(t: Table, group_by: Sequence[str]):
    arrays = {"n:" + c: a for c, a in t.num.items()}
    arrays.update(("t:" + c, codes) for c, (codes, _) in t.text.items())
    if group_by and t.n:
        # last key first for lexsort; text columns by code (one code per value within a table)
        order = np.lexsort([t.text[c][0] if c in t.text else t.col(c) for c in reversed(group_by)])
        arrays = {name: a[order] for name, a in arrays.items()}
    data = {"n": t.n, "values": {c: values for c, (_, values) in t.text.items()}, "schema_line": t.schema_line,
            "missing_columns": t.missing_columns, "skipped_rows": t.skipped_rows, "engine": t.engine,
            "warnings": [w.replace(t.path, _PATH) for w in t.warnings], "bounds": column_bounds(t)}
    return arrays, data


def column_bounds(t: Table) -> Dict[str, list]:
    """[min, max] of each float column, NaN ignored ([None, None]: all missing), infinities kept."""
    out = {}
    for c, a in t.num.items():
        if a.dtype.kind == "f" and a.size:
            lo, hi = float(np.fmin.reduce(a)), float(np.fmax.reduce(a))  # fmin/fmax skip NaN
            out[c] = [None, None] if lo != lo else [lo, hi]
    return out


def bounds_of_copy(data: dict) -> Dict[str, Tuple[Optional[float], Optional[float]]]:
    """The copy's bounds when well formed, else none (every check then runs in full)."""
    got = data.get("bounds")
    if not isinstance(got, dict):
        return {}
    out = {}
    for c, b in got.items():
        if not (isinstance(b, list) and len(b) == 2 and all(x is None or type(x) is float for x in b)
                and (b[0] is None) == (b[1] is None)):
            return {}
        out[str(c)] = (b[0], b[1])
    return out


def table_of_copy(path: str, arrays, data) -> Table:
    t = Table(path=path, n=int(data["n"]), schema_line=data["schema_line"],
              missing_columns=list(data["missing_columns"]), skipped_rows=int(data["skipped_rows"]),
              engine=str(data["engine"]), warnings=[str(w).replace(_PATH, path) for w in data["warnings"]],
              bounds=bounds_of_copy(data))
    for key, a in arrays.items():
        kind, _, name = key.partition(":")
        if kind == "n":
            t.num[name] = a
        else:
            t.text[name] = (a, [str(v) for v in data["values"][name]])
    return t


def concat(a: Table, b: Table) -> Table:
    """The rows of ``a`` then those of ``b``, two consecutive parts of one file (the same header),
    as one table: numeric columns joined, text codes of ``b`` renumbered into ``a``'s dictionary."""
    t = Table(path=a.path, n=a.n + b.n, schema_line=a.schema_line, missing_columns=list(a.missing_columns),
              skipped_rows=a.skipped_rows + b.skipped_rows,
              engine=a.engine if b.engine in ("", a.engine) else f"{a.engine}; {b.engine}",
              warnings=a.warnings + [w for w in b.warnings if w not in a.warnings])
    for c in list(a.num) + [c for c in b.num if c not in a.num]:
        t.num[c] = np.concatenate([a.col(c), b.col(c)])
    for c in list(a.text) + [c for c in b.text if c not in a.text]:
        ca, va = a.text.get(c, (np.full(a.n, -1, np.int32), []))
        cb, vb = b.text.get(c, (np.full(b.n, -1, np.int32), []))
        values = list(va)
        index = {v: i for i, v in enumerate(values)}
        lut = np.full(len(vb) + 1, -1, np.int32)  # the last entry: -1 (empty) stays -1
        for j, v in enumerate(vb):
            k = index.get(v)
            if k is None:
                k = index[v] = len(values)
                values.append(v)
            lut[j] = k
        t.text[c] = (np.concatenate([ca, lut[cb]]).astype(np.int32, copy=False), values)
    if a.bounds:  # known for a's rows (a copy's): b's joined in; a column a lacks stays unknown
        tail = column_bounds(b)
        for c, (lo, hi) in a.bounds.items():
            blo, bhi = tail.get(c, [None, None]) if b.n else [None, None]
            if lo is None:
                t.bounds[c] = (blo, bhi)
            elif blo is None:
                t.bounds[c] = (lo, hi)
            else:
                t.bounds[c] = (min(lo, blo), max(hi, bhi))
    return t
