"""Fast generator of a large synthetic run directory for the report benchmarks.

    python bench/report/gen.py RUN_DIR [--hosts 1024 --gpus 8 --hours 24 --steps 1440]
                                       [--copies] [--punch]

Writes, per host, what its monitor writes: ``monitor/<host>.gpu.csv`` and ``<host>.host.csv`` in the
exact contract format (``monitors/schema.py``: schema comment line, header, rows; empty cell = not
measured) and ``<host>.events.jsonl`` (the daemon's header event with its interval); per rank,
``metrics/rank<R>.jsonl`` (``--steps`` step records, spread over the job); and the job script's own
records (``.hpclaunch/state`` with the job's start and end, ``logs/attempt0/ranks.tsv``). Uses
pyarrow's CSV writer for speed when available, else the csv module (slow for 10 M rows).

``--copies``: after each host's files are written, the columnar copies the job's accounting step
makes of them (reports/columnar.py, through the readers themselves with the policy of a job that
ended). ``--punch`` (with ``--copies``): then the text files' blocks are freed (a hole punched over
the whole file, its size, inode and modification time kept), so the copies stay valid while the
text takes no disk: how a run larger than the free disk is measured from its copies. A punched
file reads as zeros: only a report that uses the copies can read such a directory. The GPU logs'
text is then never written (only its size: a hole), and their copies are made from the same
columns, as the reader would parse them from the text: the generator first checks, on one host,
that this copy equals the reader's copy of the real text, value for value.

The totals are known: the energy counter is the exact cumulative trapezoid of the power column, so a
report must reproduce ``expected_totals``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from hpclaunch.monitors import schema  # noqa: E402

T0 = 1_763_000_000.0


def _gpu_columns(h: int, ngpu: int, nsamples: int, interval: float, rng):
    n = ngpu * nsamples
    k = np.arange(nsamples, dtype=np.float64)
    t = T0 + k * interval + rng.uniform(0, 0.004, nsamples)  # one timestamp per sweep
    t = np.repeat(t, ngpu)
    g = np.tile(np.arange(ngpu), nsamples)
    phase = (h * ngpu + g) * 0.37
    power = 250.0 + 120.0 * np.sin(2 * np.pi * (t - T0) / 300.0 + phase) + 3.0 * (g % 3)
    power = np.round(power, 3)
    # counter = exact cumulative trapezoid of the logged power (mJ), per GPU
    p2 = power.reshape(nsamples, ngpu)
    t2 = t.reshape(nsamples, ngpu)
    seg = 0.5 * (p2[1:] + p2[:-1]) * np.diff(t2, axis=0) * 1000.0
    energy = np.vstack([np.zeros((1, ngpu)), np.cumsum(seg, axis=0)]) + 5e9
    temp = np.round(60 + 0.08 * (power - 250) + (g == (h % ngpu)) * 12, 1)
    util = np.where(((t - T0) % 1800) < 60, 0.0, 97.0)
    throttle = np.where(power > 360, 0x4, 0x0) | np.where(util == 0, 0x1, 0)
    ranks = [str(h * ngpu + i) for i in range(ngpu)]
    gi = g.astype(np.int32)
    cols = {
        "time_unix": t, "host": Text([f"node{h:03d}"], np.zeros(n, np.int32)), "gpu_index": g,
        "gpu_uuid": Text([f"GPU-{h:04d}-{i:04d}-aaaa-bbbb" for i in range(ngpu)], gi),
        "ranks": Text(ranks, gi), "power_w": power, "power_avg_w": power,
        "energy_mj": np.round(energy.reshape(-1), 0).astype(np.int64), "temp_c": temp,
        "mem_temp_c": temp + 5, "mem_used_mib": np.full(n, 61234, np.int64),
        "mem_total_mib": np.full(n, 81559, np.int64), "util_pct": util, "mem_util_pct": util / 2,
        "sm_clock_mhz": np.full(n, 1980, np.int64), "mem_clock_mhz": np.full(n, 2619, np.int64),
        "power_limit_w": np.full(n, 700.0), "throttle_reasons": throttle.astype(np.int64),
        "slowdown_temp_c": np.full(n, 89.0), "shutdown_temp_c": np.full(n, 92.0),
        "viol_power_ns": (np.cumsum((throttle & 0x4).reshape(nsamples, ngpu) > 0, axis=0)
                          .reshape(-1) * int(interval * 1e9)).astype(np.int64),
        "viol_thermal_ns": np.zeros(n, np.int64), "ecc_dbe_total": np.zeros(n, np.int64),
        "error": Text([], np.full(n, -1, np.int32)),
    }
    # per-reason counters as an H100 logs them: the power-cap one follows viol_power_ns, the rest 0
    for reason, col in schema.THROTTLE_COUNTER_COLUMNS.items():
        cols[col] = cols["viol_power_ns"] if reason == "sw_power_cap" else np.zeros(n, np.int64)
    cols["xid_count"] = np.zeros(n, np.int64)  # XIDs collected, none raised
    return cols, energy[-1] - energy[0]


class Text:
    """A text column as dictionary codes (-1: an empty cell) into its values in order of first
    appearance: no strings made per row."""

    def __init__(self, values, codes):
        self.values, self.codes = list(values), codes

    def __len__(self):
        return len(self.codes)

    def strings(self) -> np.ndarray:
        return np.array(self.values + [""], dtype=object)[self.codes]

    def arrow(self):
        import pyarrow as pa
        return pa.DictionaryArray.from_arrays(pa.array(self.codes, mask=self.codes < 0), pa.array(self.values, pa.string()))


def _arrow_table(columns, cols: dict):
    import pyarrow as pa
    return pa.table({c: cols[c].arrow() if isinstance(cols[c], Text) else cols[c] for c in columns})


def _write_table(path: Path, schema_name: str, columns, cols: dict):
    with open(path, "w") as f:
        f.write(schema.header_comment(schema_name))
        f.write(",".join(columns) + "\n")
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:  # pragma: no cover - slow path
        import csv
        with open(path, "a", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerows(zip(*((cols[c].strings() if isinstance(cols[c], Text) else cols[c]).tolist()
                              for c in columns)))
        return
    tbl = _arrow_table(columns, cols)
    with open(path, "ab") as f:
        pcsv.write_csv(tbl, f, pcsv.WriteOptions(quoting_style="none", include_header=False))


_STEP = ('{"kind":"step","time_unix":%r,"rank":%d,"epoch":0,"step":%d,"loss":%r,'
         '"samples_per_s":%r,"step_time_s":%r,"samples":64}\n')


def _write_metrics(path: Path, r: int, steps: int, hours: float) -> None:
    """One rank's metrics as train_entry writes them: a header, then a step record every
    hours/steps (rank 7 a straggler)."""
    st = 0.5 * (1.3 if r == 7 else 1.0)
    sps = 64 / st
    dt = hours * 3600 / steps
    lines = [json.dumps({"kind": "header", "schema": "hpclaunch.metrics/1", "rank": r}) + "\n"]
    lines += [_STEP % (T0 + s * dt, r, s, 2.0 / (1 + s / 100), sps, st) for s in range(steps)]
    with open(path, "w") as f:
        f.write("".join(lines))


def _host_files(run_dir: Path, h: int, ngpu: int, nsamples: int, interval: float, steps: int, hours: float,
                rng, sparse_gpu: bool = False) -> tuple:
    """Every file of host ``h``; (its GPU energy in J, the files written)."""
    mon = run_dir / schema.MONITOR_DIR
    host = f"node{h:03d}"
    cols, e_mj = _gpu_columns(h, ngpu, nsamples, interval, rng)
    gpu = mon / schema.gpu_file(host)
    if sparse_gpu:
        _sparse_gpu_log(gpu, cols)
    else:
        _write_table(gpu, schema.GPU_SCHEMA, schema.GPU_COLUMNS, cols)
    del cols
    m = max(2, nsamples // 10)
    th = T0 + np.arange(m) * interval * 10
    hc = {
        "time_unix": th, "host": Text([host], np.zeros(m, np.int32)), "cpu_pct": np.full(m, 35.0),
        "mem_used_mib": np.full(m, 200000, np.int64), "mem_total_mib": np.full(m, 512000, np.int64),
        "load1": np.full(m, 12.0),
        "rapl_energy_uj": (1e12 + (th - T0) * 400.0 * 1e6).astype(np.int64),
        "cpu_temp_c": np.full(m, 55.0), "monitor_cpu_s": (th - T0) * 0.002,
        "monitor_rss_mib": np.full(m, 24.0),
    }
    hostf = mon / schema.host_file(host)
    _write_table(hostf, schema.HOST_SCHEMA, schema.HOST_COLUMNS, hc)
    with open(mon / f"{host}.events.jsonl", "w") as f:  # the daemon's first record: its interval
        f.write(json.dumps({"time_unix": T0 - 0.05, "host": host, "kind": "header",
                            "detail": {"interval_s": interval, "counter_interval_s": 5.0}}) + "\n")
    metrics = []
    for i in range(ngpu):
        r = h * ngpu + i
        path = run_dir / "metrics" / f"rank{r}.jsonl"
        _write_metrics(path, r, steps, hours)
        metrics.append(path)
    return float(np.sum(np.round(e_mj))) / 1000.0, (gpu, hostf, metrics)


def _sparse_gpu_log(path: Path, cols: dict) -> None:
    """``--punch``'s GPU log: a file of the size the monitor's CSV has (the text is made in memory, never
    written: a hole), and the columnar copy the accounting step makes of that text, from the same
    columns: the table the reader parses from it (the CSV writer prints each float so that it parses
    back to the same value). ``check_sparse_copy`` compares the two ways on one host."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from hpclaunch.reports import columnar, readers, table

    assert all(isinstance(cols[c], Text) and "" not in cols[c].values for c in readers.GPU_TEXT)
    head = (schema.header_comment(schema.GPU_SCHEMA) + ",".join(schema.GPU_COLUMNS) + "\n").encode()
    buf = pa.BufferOutputStream()
    pcsv.write_csv(_arrow_table(schema.GPU_COLUMNS, cols), buf,
                   pcsv.WriteOptions(quoting_style="none", include_header=False))
    with open(path, "wb") as f:
        f.truncate(len(head) + buf.getvalue().size)
    n = len(cols["time_unix"])
    t = table.Table(path=str(path), n=n, schema_line=schema.GPU_SCHEMA, engine="pyarrow")
    for c in readers.GPU_NUMERIC + readers.GPU_OPTIONAL:
        t.num[c] = np.asarray(cols[c], dtype=np.float64)
    for c in readers.GPU_TEXT:   # codes into values in order of first appearance, as the reader makes them
        t.text[c] = (cols[c].codes, [v for v in cols[c].values])
    kind = readers.copy_kind(schema.GPU_SCHEMA, readers.GPU_NUMERIC, readers.GPU_TEXT, readers.GPU_OPTIONAL,
                             readers.GPU_ORDER)
    arrays, data = table.copy_of_table(t, readers.GPU_ORDER)
    if not columnar.store(path, kind, os.stat(path), arrays, data):
        raise SystemExit(f"{path}: its copy could not be written")


def check_sparse_copy(tmp: Path, ngpu: int, nsamples: int, interval: float) -> None:
    """The copy ``_sparse_gpu_log`` makes is the reader's copy of the real text, value for value."""
    from hpclaunch.reports import columnar, readers

    kind = readers.copy_kind(schema.GPU_SCHEMA, readers.GPU_NUMERIC, readers.GPU_TEXT, readers.GPU_OPTIONAL,
                             readers.GPU_ORDER)
    got = []
    for name, sparse in (("real", False), ("sparse", True)):
        d = tmp / name / schema.MONITOR_DIR
        d.mkdir(parents=True)
        cols, _ = _gpu_columns(0, ngpu, min(nsamples, 3600), interval, np.random.default_rng([0, 0]))
        path = d / schema.gpu_file("node000")
        if sparse:
            _sparse_gpu_log(path, cols)
        else:
            _write_table(path, schema.GPU_SCHEMA, schema.GPU_COLUMNS, cols)
            readers.read_gpu_log(path, "auto", columnar.Policy(True))
        arrays, data = columnar.load(path, kind, os.stat(path))
        got.append((os.stat(path).st_size, arrays, json.loads(json.dumps(data).replace(str(path), "PATH"))))
    (sa, aa, da), (sb, ab, db) = got
    same = sa == sb and da == db and list(aa) == list(ab) and all(np.array_equal(aa[k], ab[k], equal_nan=True) for k in aa)
    if not same:
        raise SystemExit("the sparse GPU log's copy differs from the reader's copy of the real text")


def make_copies(gpu: Path, host: Path, metrics) -> None:
    """The columnar copies the job's accounting step makes (reports/slurm_comment.py builds the report
    with ``logs_final``): each reader through columnar with the policy of a job that ended."""
    from hpclaunch.reports import columnar, metrics_log, readers

    ended = columnar.Policy(True)
    if gpu is not None:
        readers.read_gpu_log(gpu, "auto", ended)
    readers.read_host_log(host, "auto", ended)
    for p in metrics:
        metrics_log.read_metrics_arrays(p, copies=ended)


def punch(path: Path) -> None:
    """Free a file's blocks, keeping its size, inode and modification time (its copy's identity)."""
    st = os.stat(path)
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fd = os.open(path, os.O_WRONLY)
    try:
        # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        if libc.fallocate(fd, 0x02 | 0x01, ctypes.c_long(0), ctypes.c_long(st.st_size)) != 0:
            raise OSError(ctypes.get_errno(), f"fallocate(PUNCH_HOLE) on {path}")
    finally:
        os.close(fd)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _hosts(run_dir: Path, hosts, ngpu, nsamples, interval, steps_per_rank, hours, seed, copies, punch_text,
           progress) -> float:
    """Hosts ``hosts`` (each from its own random stream: any split of the hosts makes the same files)."""
    gpu_total_j = 0.0
    t_start = time.monotonic()
    for k, h in enumerate(hosts):
        rng = np.random.default_rng([seed, h])
        e_j, (gpu, hostf, metrics) = _host_files(run_dir, h, ngpu, nsamples, interval, steps_per_rank, hours, rng,
                                                 sparse_gpu=copies and punch_text)
        gpu_total_j += e_j
        if copies:
            make_copies(None if punch_text else gpu, hostf, metrics)
            if punch_text:
                for p in (hostf, *metrics):
                    punch(p)
        if progress and (k + 1) % max(1, len(hosts) // 20) == 0:
            print(f"  {k + 1}/{len(hosts)} hosts, {time.monotonic() - t_start:.0f} s", file=sys.stderr, flush=True)
    return gpu_total_j


def generate(run_dir, nhosts=64, ngpu=8, hours=6.0, interval=1.0, steps_per_rank=600, seed=0,
             copies=False, punch_text=False, progress=False, procs=1):
    """``procs``: processes sharing the hosts (each host's data is the same whatever the split)."""
    run_dir = Path(run_dir)
    (run_dir / schema.MONITOR_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics").mkdir(exist_ok=True)
    (run_dir / "logs" / "attempt0").mkdir(parents=True, exist_ok=True)
    nsamples = int(hours * 3600 / interval)
    if copies and punch_text:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            check_sparse_copy(Path(tmp), ngpu, nsamples, interval)
    args = (ngpu, nsamples, interval, steps_per_rank, hours, seed, copies, punch_text)
    if procs > 1:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(procs) as ex:
            parts = [ex.submit(_hosts, run_dir, list(range(i, nhosts, procs)), *args, progress and i == 0)
                     for i in range(procs)]
            gpu_total_j = sum(f.result() for f in parts)
    else:
        gpu_total_j = _hosts(run_dir, list(range(nhosts)), *args, progress)
    (run_dir / "logs" / "attempt0" / "ranks.tsv").write_text(
        "".join(f"{r}\tnode{r // ngpu:03d}\t{1000 + r}\n" for r in range(nhosts * ngpu)))
    # the job script's record (templates/prologue.j2): started at the first sample, ended after the last
    state = run_dir / ".hpclaunch" / "state"
    state.parent.mkdir(exist_ok=True)
    state.write_text(f"{int(T0)} attempt=0 start\n{int(T0 + hours * 3600) + 2} attempt=0 end\n")
    # host RAPL: 400 W for (m-1)*10 s per host
    cpu_total_j = nhosts * 400.0 * (max(2, nsamples // 10) - 1) * interval * 10
    return {"gpu_j": gpu_total_j, "cpu_j": cpu_total_j, "rows": nhosts * ngpu * nsamples,
            "hosts": nhosts, "gpus": ngpu, "hours": hours, "steps_per_rank": steps_per_rank,
            "copies": bool(copies), "punched": bool(copies and punch_text)}


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--steps", type=int, default=600, help="step records per rank")
    ap.add_argument("--copies", action="store_true", help="also the columnar copies the accounting step makes")
    ap.add_argument("--punch", action="store_true", help="with --copies: free the text files' blocks")
    ap.add_argument("--procs", type=int, default=1, help="processes sharing the hosts")
    a = ap.parse_args()
    if a.punch and not a.copies:
        ap.error("--punch needs --copies (a punched file without its copy cannot be read)")
    print(json.dumps(generate(a.run_dir, a.hosts, a.gpus, a.hours, steps_per_rank=a.steps, copies=a.copies,
                              punch_text=a.punch, progress=True, procs=a.procs)))
