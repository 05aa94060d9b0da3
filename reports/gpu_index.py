"""Every GPU log's rows indexed by GPU: a GPU id per (host, gpu_index), each file's rows grouped by GPU,
and one GPU's rows from all files merged in time order (exact duplicates dropped)."""
from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

import numpy as np

from hpclaunch.reports import readers
from hpclaunch.reports.model import host_from_filename


def index_gpu_tables(tables: Iterable[readers.Table]):
    """Assign a GPU id per (host, gpu_index) and sort each file's rows by GPU (stable, so time
    order within a file is kept). Sorting per file keeps the gathers cache-resident. The tables
    are left as they are (the per-GPU columns are copies or views); pass a generator to hold one
    file's raw columns at a time.

    Returns (keys: list[(host, index)], segs: gid -> [(file, a, b)], per-file sorted columns,
    text value counts per gid, stats)."""
    key_to_gid: Dict[Tuple[str, int], int] = {}
    segs: Dict[int, List[Tuple[int, int, int]]] = {}
    fcols: List[Dict[str, np.ndarray]] = []
    txt: Dict[str, Dict[int, Dict[str, int]]] = {c: {} for c in ("gpu_uuid", "ranks", "error")}
    stats = {"rows": 0, "unindexed": 0, "bad_time": 0}
    M = 1_000_003
    for fi, tb in enumerate(tables):
        if tb.n == 0:
            fcols.append({})
            continue
        stats["rows"] += tb.n
        fname_host = host_from_filename(tb.path)
        hcodes, hdic = tb.text["host"]
        hnames = list(hdic) + [fname_host]
        gi = tb.col("gpu_index")
        runs = _gpu_runs(hcodes, len(hdic), gi)
        if runs is not None:   # each GPU's rows one run, in key order (a columnar copy; one GPU)
            edges, local = runs
            lut = [key_to_gid.setdefault((str(hnames[hi]), ix - 1), len(key_to_gid))
                   for hi, ix in (divmod(lk, M) for lk in local.tolist())]
            fcols.append(dict(tb.num))   # views, no copy
            for c in readers.GPU_NUMERIC:
                fcols[-1].setdefault(c, np.full(tb.n, np.nan))
            for gid, a_, b_ in zip(lut, edges[:-1].tolist(), edges[1:].tolist()):
                segs.setdefault(gid, []).append((fi, slice(a_, b_)))
            run_gid = np.array(lut, np.int64)
            for c in txt:
                codes, dic = tb.text[c]
                for gg, code, k_ in _value_counts(codes, None, edges, run_gid):
                    val = dic[code] if code >= 0 else ""
                    dd = txt[c].setdefault(gg, {})
                    dd[val] = dd.get(val, 0) + k_
            continue
        hidx = np.where(hcodes < 0, len(hdic), hcodes).astype(np.int64)
        with np.errstate(invalid="ignore"):  # an index no GPU has (1e18, -1, 0.5) names none
            bad = ~((gi >= 0) & (gi < 100_000) & (gi == np.floor(gi)))
        stats["unindexed"] += int(bad.sum())
        local = hidx * M + (np.where(bad, -1, gi).astype(np.int64) + 1)
        n = local.size
        edges = np.concatenate([[0], np.flatnonzero(local[1:] != local[:-1]) + 1, [n]])
        grouped = bool((np.diff(local[edges[:-1]]) > 0).all())
        sweep = 0 if grouped else _sweep_length(local)
        if grouped:  # each GPU's rows together, in key order (one GPU; a columnar copy): no sort
            uniq, inv = local[edges[:-1]], np.repeat(np.arange(edges.size - 1), np.diff(edges))
        elif sweep:  # the daemon's usual layout: the first sweep's keys say every row's
            uniq, inv = np.unique(local[:sweep], return_inverse=True)
            inv = np.tile(inv, n // sweep)
        else:
            uniq, inv = np.unique(local, return_inverse=True)
        lut = np.empty(uniq.size, np.int32)
        for j, lk in enumerate(uniq.tolist()):
            hi, ix = divmod(lk, M)
            lut[j] = key_to_gid.setdefault((str(hnames[hi]), ix - 1), len(key_to_gid))
        gid_f = lut[inv.reshape(-1)]
        k = uniq.size
        cols = readers.GPU_NUMERIC + tuple(c for c in readers.GPU_OPTIONAL if c in tb.num)
        # When each GPU's rows are one run: (the (m, k) blocks to transpose, or None; each row's GPU;
        # the runs' edges). The text columns' values then count by run, not by a sort of every row.
        runs = (None, gid_f, edges) if grouped else None
        if grouped:  # views, no copy
            fcols.append(dict(tb.num))
            for a_, b_ in zip(edges[:-1].tolist(), edges[1:].tolist()):
                segs.setdefault(int(gid_f[a_]), []).append((fi, slice(a_, b_)))
        elif sweep:
            # the daemon's usual layout: one row per GPU per sweep, same order -> a blocked
            # transpose makes each GPU's rows contiguous (cheaper than a gather or strided views)
            m = n // k
            fcols.append({c: np.ascontiguousarray(tb.col(c).reshape(m, k).T).reshape(-1)
                          for c in cols})
            for j in range(k):
                segs.setdefault(int(gid_f[j]), []).append((fi, slice(j * m, (j + 1) * m)))
            runs = ((m, k), np.repeat(gid_f[:k], m), np.arange(0, n + 1, m))
        else:
            order = np.argsort(gid_f.astype(np.int16) if len(key_to_gid) < 32000 else gid_f, kind="stable")
            gs = gid_f[order]
            fcols.append({c: tb.col(c)[order] for c in cols})
            bounds = np.flatnonzero(gs[1:] != gs[:-1]) + 1
            st = np.concatenate([[0], bounds])
            en = np.concatenate([bounds, [gs.size]])
            for a_, b_ in zip(st.tolist(), en.tolist()):
                segs.setdefault(int(gs[a_]), []).append((fi, slice(a_, b_)))
        for c in readers.GPU_NUMERIC:
            fcols[-1].setdefault(c, np.full(n, np.nan))
        for c in txt:
            codes, dic = tb.text[c]
            if runs is None:
                counts = _value_counts(codes, gid_f, None)
            else:
                blocks, run_gid, run_edges = runs
                counts = _value_counts(codes if blocks is None else codes.reshape(blocks).T.reshape(-1),
                                       run_gid, run_edges)
            for gg, code, k_ in counts:
                val = dic[code] if code >= 0 else ""
                dd = txt[c].setdefault(gg, {})
                dd[val] = dd.get(val, 0) + k_
    keys: List[Tuple[str, int]] = [None] * len(key_to_gid)  # type: ignore
    for k, g in key_to_gid.items():
        keys[g] = k
    return keys, segs, fcols, txt, stats


def _gpu_runs(hcodes: np.ndarray, nhost: int, gi: np.ndarray):
    """(edges of the runs, each run's key) when the rows are runs of one GPU each, with a valid index,
    in increasing key order (what the old path's ``grouped`` finds), found from where the host or the
    index changes: no pass that makes an integer per row. None otherwise."""
    n = gi.size
    with np.errstate(invalid="ignore"):   # a NaN index differs from every row: its own run, then refused
        chg = np.flatnonzero((hcodes[1:] != hcodes[:-1]) | (gi[1:] != gi[:-1]))
    if chg.size > 65536:
        return None
    edges = np.concatenate([[0], chg + 1, [n]])
    g, h = gi[edges[:-1]], hcodes[edges[:-1]]
    with np.errstate(invalid="ignore"):
        if not ((g >= 0) & (g < 100_000) & (g == np.floor(g))).all():
            return None
    local = np.where(h < 0, nhost, h).astype(np.int64) * 1_000_003 + g.astype(np.int64) + 1
    if not (np.diff(local) > 0).all():
        return None
    return edges, local


def _sweep_length(local: np.ndarray) -> int:
    """k when the rows are whole sweeps of the same k different GPUs in the same order (a daemon's
    file: one row per GPU per sample), else 0."""
    n = local.size
    again = np.flatnonzero(local[1:] == local[0])
    k = int(again[0]) + 1 if again.size else 0
    if not k or n % k or np.unique(local[:k]).size != k:
        return 0
    return k if np.array_equal(local.reshape(-1, k), np.broadcast_to(local[:k], (n // k, k))) else 0


def _value_counts(codes: np.ndarray, gid, edges, run_gid=None):
    """(GPU id, code, rows) of a text column. ``edges``: the runs of rows of one GPU each when the
    rows are grouped; a value that changes only where the GPU does (a UUID, the ranks, an error
    column left empty) is then counted by run, without a sort. ``run_gid``: each run's GPU, when
    ``gid`` (each row's) is not made."""
    if edges is not None:
        change = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        if np.isin(change, edges).all():
            heads = edges[:-1]
            return zip((gid[heads] if run_gid is None else run_gid).tolist(), codes[heads].tolist(),
                       np.diff(edges).tolist())
    if gid is None:
        gid = np.repeat(run_gid, np.diff(edges))
    up, cnt = np.unique(codes.astype(np.int64) * 65536 + gid, return_counts=True)
    return ((p_ % 65536, p_ // 65536, k_) for p_, k_ in zip(up.tolist(), cnt.tolist()))


def gpu_rows(seglist, fcols) -> Tuple[Dict[str, np.ndarray], int, int]:
    """One GPU's rows from all files: time-sorted, exact duplicates on time dropped.
    Returns (columns, duplicates removed, rows without a time)."""
    if len(seglist) == 1:
        fi, sl = seglist[0]
        cols = {c: v[sl] for c, v in fcols[fi].items()}
    else:
        cols = {c: np.concatenate([fcols[fi][c][sl] for fi, sl in seglist]) for c in readers.GPU_NUMERIC}
        for c in readers.GPU_OPTIONAL:  # files from before the column: NaN for their rows
            if any(c in fcols[fi] for fi, _ in seglist):
                cols[c] = np.concatenate([fcols[fi][c][sl] if c in fcols[fi] else
                                          np.full(fcols[fi]["time_unix"][sl].size, np.nan)
                                          for fi, sl in seglist])
    t = cols["time_unix"]
    nan_t = np.isnan(t)
    nbad = int(nan_t.sum())
    if nbad:
        cols = {c: v[~nan_t] for c, v in cols.items()}
        t = cols["time_unix"]
    d = np.diff(t)
    if (d < 0).any():
        o = np.argsort(t, kind="stable")
        cols = {c: v[o] for c, v in cols.items()}
        t = cols["time_unix"]
        d = np.diff(t)
    dup = d == 0
    ndup = int(dup.sum())
    if ndup:
        keep = np.concatenate([[True], ~dup])
        cols = {c: v[keep] for c, v in cols.items()}
    return cols, ndup, nbad
