"""The report model reads the readers' tables and never changes them (issue 12): a caller that
reads a log once and reports on it twice, or renders it after, must see the log as it was read."""
import copy
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from synth import GpuSpec, HostSpec, T0, write_run  # noqa: E402

from hpclaunch.reports import build_report, readers  # noqa: E402
from hpclaunch.reports.gpu_index import index_gpu_tables  # noqa: E402
from hpclaunch.reports.plausible import drop_implausible  # noqa: E402


def snapshot(tb: readers.Table):
    return (tb.n, {k: v.copy() for k, v in tb.num.items()},
            {k: (c.copy(), list(d)) for k, (c, d) in tb.text.items()}, copy.copy(tb.warnings))


def assert_same(tb: readers.Table, snap):
    n, num, text, warnings = snap
    assert tb.n == n
    assert set(tb.num) == set(num)
    for k, v in num.items():
        np.testing.assert_array_equal(tb.num[k], v, err_msg=k)
    assert set(tb.text) == set(text)
    for k, (c, d) in text.items():
        np.testing.assert_array_equal(tb.text[k][0], c, err_msg=k)
        assert tb.text[k][1] == d
    assert tb.warnings == warnings


def _run(tmp_path, shuffle):
    gpus = [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1"), GpuSpec("n2", 0, ranks="2")]
    return write_run(tmp_path, gpus, [HostSpec("n1"), HostSpec("n2")], duration=600, shuffle=shuffle)


def test_index_gpu_tables_leaves_the_tables_as_read(tmp_path):
    # n1's file holds two GPUs (sorted or shuffled rows), n2's one: every layout the indexer handles
    for shuffle in (False, True):
        d = tmp_path / str(shuffle)
        _run(d, shuffle)
        tables = [readers.read_gpu_log(p, "auto") for p in readers.monitor_files(d)["gpu"]]
        snaps = [snapshot(tb) for tb in tables]
        keys, segs, fcols, txt, stats = index_gpu_tables(tables)
        assert sorted(keys) == [("n1", 0), ("n1", 1), ("n2", 0)]
        assert stats["rows"] == sum(tb.n for tb in tables) > 0
        for tb, snap in zip(tables, snaps):
            assert_same(tb, snap)


def test_drop_implausible_returns_a_new_table_and_keeps_the_old():
    t = np.array([T0, T0 + 1, T0 + 2, 1.0])   # the last row stamped decades off
    tb = readers.Table(path="n1.gpu.csv", n=4,
                       num={"time_unix": t, "energy_mj": np.array([1.0, -5.0, 3.0, 4.0]),
                            "power_w": np.array([100.0, np.inf, 100.0, 100.0])},
                       text={"host": (np.zeros(4, np.int32), ["n1"])})
    snap = snapshot(tb)
    new, why = drop_implausible(tb, (T0 - 10, T0 + 10), ("energy_mj",))
    assert "dropped 1 row" in why and "1 infinite" in why and "1 negative" in why
    assert new is not tb and new.n == 3
    assert np.isnan(new.num["energy_mj"][1]) and np.isnan(new.num["power_w"][1])
    assert new.text["host"][0].size == 3
    assert_same(tb, snap)
    same, why = drop_implausible(new, (T0 - 10, T0 + 10), ("energy_mj",))
    assert same is new and why is None


def test_build_report_leaves_every_table_it_read_as_read(tmp_path, monkeypatch):
    truth = _run(tmp_path, shuffle=True)
    read = []
    for name in ("read_gpu_log", "read_host_log"):
        real = getattr(readers, name)

        def recording(path, engine="auto", copies=None, _real=real):
            tb = _real(path, engine, copies)
            read.append((tb, snapshot(tb)))
            return tb
        monkeypatch.setattr(readers, name, recording)
    rep = build_report(tmp_path)
    assert len(read) == 4  # two GPU logs, two host logs
    assert abs(rep.data["energy_j"]["gpu"] - truth["gpu_total"]) < 1e-3 * truth["gpu_total"]
    for tb, snap in read:
        assert_same(tb, snap)
    # and a second report on the same files says the same
    monkeypatch.undo()
    assert build_report(tmp_path).data["energy_j"] == rep.data["energy_j"]


def test_the_gpu_index_is_the_same_whatever_the_rows_order():
    """A daemon's file (whole sweeps, GPUs in one order), the same rows shuffled, and grouped by GPU (a
    columnar copy) take three paths through the indexer; each GPU's rows and text counts must agree,
    with a GPU whose ranks change mid-run and one error cell, and a file with a sweep cut short."""
    from hpclaunch.reports.gpu_index import gpu_rows

    sweeps, gpus = 50, 3
    t = np.repeat(T0 + np.arange(sweeps, dtype=float), gpus)
    gi = np.tile(np.arange(gpus, dtype=float), sweeps)
    ranks = np.tile(np.array([0, 1, 2], np.int32), sweeps)
    ranks[(t >= T0 + 20) & (gi == 1)] = 3                      # GPU 1's ranks change at sweep 20
    error = np.full(t.size, -1, np.int32)
    error[7] = 0                                               # one row's error cell
    power = np.arange(t.size, dtype=float)

    def table(order, name="n1.gpu.csv"):
        return readers.Table(path=name, n=order.size,
                             num={c: v[order] for c, v in (("time_unix", t), ("gpu_index", gi), ("power_w", power),
                                                           ("energy_mj", power * 10))},
                             text={"host": (np.zeros(order.size, np.int32), ["n1"]),
                                   "gpu_uuid": ((gi[order] + 0).astype(np.int32), ["U0", "U1", "U2"]),
                                   "ranks": (ranks[order], ["0", "1", "2", "1,3"]),
                                   "error": (error[order], ["Xid 79"])})

    rows = np.arange(t.size)
    orders = {"sweeps": rows, "shuffled": np.random.default_rng(1).permutation(rows),
              "grouped": np.argsort(gi, kind="stable"), "cut sweep": rows[:-1]}
    seen = {}
    for what, order in orders.items():
        keys, segs, fcols, txt, stats = index_gpu_tables([table(order)])
        per_gpu = {}
        for g, key in enumerate(keys):
            cols, _, _ = gpu_rows(segs[g], fcols)
            per_gpu[key] = ({c: cols[c].tolist() for c in ("time_unix", "power_w")},
                            {c: txt[c].get(g) for c in txt})
        seen[what] = per_gpu
    assert seen["sweeps"] == seen["shuffled"] == seen["grouped"], seen
    assert seen["sweeps"][("n1", 1)][1]["ranks"] == {"1": 20, "1,3": 30}
    assert seen["sweeps"][("n1", 1)][1]["error"] == {"": 49, "Xid 79": 1}
    assert seen["cut sweep"][("n1", 2)][0]["power_w"] == seen["sweeps"][("n1", 2)][0]["power_w"][:-1]
    assert seen["cut sweep"][("n1", 0)] == seen["sweeps"][("n1", 0)]
