"""A rank's metrics file (``metrics/rank<R>.jsonl``, docs/run-directory.md) read into arrays: ``is_step`` /
``is_epoch`` / ``is_memory`` masks and one float column per METRIC_FLOATS name (NaN = absent).

pyarrow's JSON reader where it is installed; the json module line by line otherwise, or for a part of
the file pyarrow refuses (e.g. a field changing type). A line counts only once it ends in a newline
(a writer killed or still running leaves its last line cut: skipped and counted, even if it parses).
With ``copies``, through reports/columnar.py: the file's copy once its job ended, and while it runs a
copy of its first part, so that a later report parses only the records appended since.
"""
from __future__ import annotations

import io
import json
import math
from typing import Dict, Optional, Tuple

import numpy as np

from hpclaunch.reports import columnar, csv_arrow, readers

METRIC_FLOATS = ("time_unix", "step", "epoch", "loss", "samples_per_s", "step_time_s", "samples",
                 "val_loss", "val_accuracy", "steps",
                 # train_entry's memory records (what a rank holds: ZeRO's saving, docs/train-entry.md)
                 "state_bytes", "params_bytes", "grads_bytes", "optimizer_bytes", "peak_rss_bytes", "cuda_peak_bytes")
KINDS = ("step", "epoch", "memory")   # a mask is_<kind> each
# The file's records in file order: its copy and the copy of its first part are of one kind.
KIND = json.dumps(["metrics", list(METRIC_FLOATS), list(KINDS)])

Metrics = Tuple[Dict[str, np.ndarray], int]  # (arrays, lines skipped: unparsable or cut)


def read_metrics_arrays(path, engine: str = "auto", copies: Optional[columnar.Policy] = None) -> Metrics:
    """(arrays, number of lines skipped). ``engine``: "auto", "pyarrow" or "csv" (the json module);
    ``copies``: as for readers.read_table, with engine "auto"."""
    if copies is None or engine != "auto":
        return _read_metrics_text(path, engine)
    return columnar.through(path, KIND, copies, lambda: _read_metrics_text(path, engine), _to_copy,
                            _from_copy, _growing(path))


def _to_copy(got: Metrics):
    return got[0], {"bad": got[1]}


def _from_copy(arrays, data) -> Metrics:
    return arrays, int(data["bad"])


def _growing(path) -> columnar.Growing:
    """The file read by parts while its job runs: records in file order."""
    def complete():
        _size, end, partial = readers.complete_end(path)
        return end, int(partial)

    def merge(a: Metrics, b: Metrics) -> Metrics:
        return {k: np.concatenate((a[0][k], b[0][k])) for k in a[0]}, a[1] + b[1]

    return columnar.Growing(KIND, complete, lambda start, end: _parse(readers.read_range(path, start, end), "auto"), merge,
                            lambda value, cut: (value[0], value[1] + cut), _to_copy, _from_copy)


def _read_metrics_text(path, engine: str) -> Metrics:
    with open(path, "rb") as f:
        data = f.read()
    cut = 0
    if data and not data.endswith(b"\n"):  # unterminated: not a record
        end = data.rfind(b"\n") + 1
        cut = int(bool(data[end:].strip()))
        data = data[:end]
    arrays, bad = _parse(data, engine)
    return arrays, bad + cut


def _parse(data: bytes, engine: str) -> Metrics:
    """The records of ``data``, whole lines."""
    if engine in ("auto", "pyarrow") and readers.have_pyarrow():
        try:
            return _parse_pyarrow(data), 0
        except Exception:  # noqa: BLE001 - fall back to the tolerant reader
            pass
    # As readers.read_jsonl reads a file: text mode, the locale's encoding, errors replaced.
    recs, bad = readers.parse_jsonl(io.TextIOWrapper(io.BytesIO(data), errors="replace"))
    kinds = [r.get("kind") for r in recs]
    out: Dict[str, np.ndarray] = {f"is_{kind}": np.array([k == kind for k in kinds], dtype=bool) for kind in KINDS}
    for c in METRIC_FLOATS:
        vals = []
        for r in recs:
            v = r.get(c)
            vals.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan)
        out[c] = np.array(vals, dtype=np.float64)
    return out, bad


def _parse_pyarrow(data: bytes) -> Dict[str, np.ndarray]:
    import pyarrow as pa
    import pyarrow.json as pj

    fields = [pa.field("kind", pa.string())] + [pa.field(c, pa.float64()) for c in METRIC_FLOATS]
    tbl = pj.read_json(io.BytesIO(data), parse_options=pj.ParseOptions(
        explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore", newlines_in_values=False))
    out: Dict[str, np.ndarray] = {}
    kind = tbl.column("kind")
    codes, values = csv_arrow.codes_column(pa.chunked_array([ch.dictionary_encode() for ch in kind.chunks],
                                                            pa.dictionary(pa.int32(), pa.string())), tbl.num_rows)
    for value in KINDS:
        out[f"is_{value}"] = codes == values.index(value) if value in values else np.zeros(tbl.num_rows, bool)
    for c in METRIC_FLOATS:
        out[c] = csv_arrow.float_column(tbl.column(c), tbl.num_rows)
    return out
