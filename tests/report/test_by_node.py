"""A large job's report node by node (reports/by_node.py, issue 50): the same document as reading every
log at once, its workers in processes of their own, and the whole way where the logs are not one
node's per name."""
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hpclaunch.reports import by_node, columnar, document, readers, to_json
from synth import GpuSpec, HostSpec, write_metrics, write_run

ROOT = Path(__file__).resolve().parents[2]


def _runs(tmp_path):
    plain = tmp_path / "job-7"
    write_run(plain, [GpuSpec(f"n{h}", i, ranks=str(4 * h + i)) for h in range(3) for i in range(4)],
              hosts=[HostSpec(f"n{h}") for h in range(3)], duration=1800.0)
    write_metrics(plain, ranks=12, steps=40, slow_rank=5)
    messy = tmp_path / "job-8"
    write_run(messy, [GpuSpec("n1", 0, reset_at=900, drop_frac=0.05, gap=(1200, 1500), throttle_window=(100, 400),
                              missing_power_frac=0.1, counter_every=5, reason_counters=True,
                              hidden_hw_thermal=(300, 600, 0.2), hot_window=(50, 500), idle_window=(2000, 2500)),
                      GpuSpec("n1", 1, counter=False, wrap_mod_mj=5e8, util=False, slowdown=None),
                      GpuSpec("n2", 0, viol_counters=False, reason_counters=True, reason_counter_reset_at=700,
                              counter_every=3, power=False)],
              hosts=[HostSpec("n1")], duration=3000.0, jitter=0.2, partial_last_line=True)
    return plain, messy


def _doc(report):
    d = json.loads(to_json(report))
    peak = d["power_w"].pop("gpu_peak")
    return d, peak


def _same_series(a, b):
    ga, gb = a.series["gpu"], b.series["gpu"]
    return list(ga) == list(gb) and all(np.array_equal(ga[k][s], gb[k][s], equal_nan=True) for k in ga for s in ga[k])


@pytest.mark.parametrize("engine", ["auto", "csv"])
def test_node_by_node_is_the_whole_report(tmp_path, engine):
    for run in _runs(tmp_path):
        whole = document.build(run, engine=engine, mode="whole")
        nodes = document.build(run, engine=engine, mode="nodes", workers=0)
        (dw, pw), (dn, pn) = _doc(whole), _doc(nodes)
        assert dn == dw, run   # every figure and every warning, in the same order
        assert pn == pytest.approx(pw, rel=1e-12)
        assert _same_series(whole, nodes) and nodes.series.get("loss") == whole.series.get("loss")


def test_workers_in_processes_of_their_own(tmp_path):
    plain, _ = _runs(tmp_path)
    whole = document.build(plain, mode="whole")
    nodes = document.build(plain, mode="nodes", workers=2)
    assert _doc(nodes)[0] == _doc(whole)[0] and _same_series(whole, nodes)


def test_logs_of_one_gpu_under_two_names_are_reported_the_whole_way(tmp_path, monkeypatch):
    run = tmp_path / "job-9"
    write_run(run, [GpuSpec("n1", 0), GpuSpec("n1", 1)], hosts=[HostSpec("n1")], split_overlap=True)
    seen = []
    real = by_node.report

    def spy(*args, **kwargs):
        try:
            return real(*args, **kwargs)
        except by_node.Mismatch as e:
            seen.append(str(e))
            raise
    monkeypatch.setattr(by_node, "report", spy)
    nodes = document.build(run, mode="nodes", workers=0)
    assert seen and "two nodes' logs" in seen[0]
    assert _doc(nodes)[0] == _doc(document.build(run, mode="whole"))[0]
    assert nodes.data["coverage"]["duplicate_rows_removed"] > 0


def test_first_report_copies_each_log_once_then_reads_only_copies(tmp_path, monkeypatch):
    plain, _ = _runs(tmp_path)
    state = plain / ".hpclaunch"
    state.mkdir()
    (state / "state").write_text(f"{int(1_763_000_000)} attempt=0 start\n{int(1_763_000_000) + 4000} attempt=0 end\n")
    parses = []
    real = readers._read_csv_table
    monkeypatch.setattr(readers, "_read_csv_table", lambda path, *a, **k: parses.append(path) or real(path, *a, **k))
    first = document.build(plain, mode="nodes", workers=0)
    logs = readers.monitor_files(plain)
    assert sorted(parses) == sorted(str(p) for p in logs["gpu"] + logs["host"])   # pass 1 parsed each once
    assert all(columnar.copy_path(p).exists() for p in logs["gpu"] + logs["host"])
    parses.clear()
    later = document.build(plain, mode="nodes", workers=0)
    assert parses == [] and _doc(later)[0] == _doc(first)[0]


def test_a_script_without_a_main_guard_is_not_run_again_by_the_workers(tmp_path):
    """multiprocessing's spawned workers import the caller's main script: one without the guard would
    start its report over in every worker. The workers here import only what their tasks name."""
    plain, _ = _runs(tmp_path)
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        from hpclaunch.reports import document
        print("start", flush=True)
        r = document.build({str(plain)!r}, mode="nodes", workers=2)
        print("gpus", len(r.data["gpus"]), flush=True)
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == ["start", "gpus", "12"]


def test_a_worker_error_reaches_the_caller(tmp_path):
    from hpclaunch.reports.workers import Pool
    pool = Pool(2)
    try:
        futures = [pool.submit(int, "12"), pool.submit(int, "not a number")]
        assert futures[0].result() == 12
        with pytest.raises(ValueError, match="not a number"):
            futures[1].result()
    finally:
        pool.close()


def test_large_jobs_go_node_by_node(tmp_path):
    files = {"gpu": [tmp_path / f"n{i}.gpu.csv" for i in range(by_node.MIN_FILES)], "host": []}
    assert by_node.wanted(files)
    few = {"gpu": files["gpu"][:2], "host": []}
    for p in few["gpu"]:
        p.write_bytes(b"")
    assert not by_node.wanted(few)


def test_a_running_jobs_logs_growing_between_the_passes_are_read_as_pass_1_saw_them(tmp_path, monkeypatch):
    """Pass 2 reads each log up to where pass 1 found its last line: the monitors append meanwhile."""
    plain, _ = _runs(tmp_path)
    state = plain / ".hpclaunch"
    state.mkdir()
    (state / "state").write_text(f"{int(1_763_000_000)} attempt=0 start\n")   # it still runs
    before = document.build(plain, mode="whole")
    log = readers.monitor_files(plain)["gpu"][0]
    tail = log.read_text().splitlines(keepends=True)[-1]
    real = by_node._read_bounds

    def then_grow(spec, items):
        got = real(spec, items)
        with open(log, "a") as f:   # a monitor's next sample, after pass 1 read the log
            f.write(tail.replace(tail.split(",")[0], str(float(tail.split(",")[0]) + 1.0), 1))
        return got
    monkeypatch.setattr(by_node, "_read_bounds", then_grow)
    seen = []
    real_report = by_node.report

    def spy(*args, **kwargs):
        try:
            return real_report(*args, **kwargs)
        except by_node.Mismatch as e:
            seen.append(str(e))
            raise
    monkeypatch.setattr(by_node, "report", spy)
    nodes = document.build(plain, mode="nodes", workers=0)
    assert not seen   # node by node, no fallback
    (dn, _), (db, _) = _doc(nodes), _doc(before)
    for d in (dn, db):   # a running job's elapsed time is the clock's
        d["job"].pop("elapsed_s")
    assert dn == db
