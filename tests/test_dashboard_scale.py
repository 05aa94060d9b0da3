"""A large job's page (hpclaunch/dashboard/envelope.py, issue 50): charts of many GPUs or hosts become
their min, mean and max, many ranks a summary and those furthest behind, and a page that has it all is
sent nothing again."""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "report"))
from synth import GpuSpec, HostSpec, write_metrics, write_run  # noqa: E402

from hpclaunch.dashboard import envelope, live  # noqa: E402
from hpclaunch.monitors import schema  # noqa: E402

NODES, GPUS = 12, 2


@pytest.fixture
def big(tmp_path, monkeypatch):
    monkeypatch.setattr(live, "UPDATE_S", 0.0)
    write_run(tmp_path, [GpuSpec(f"n{h:02d}", i, a=150 + 10 * h + i) for h in range(NODES) for i in range(GPUS)],
              hosts=[HostSpec(f"n{h:02d}") for h in range(NODES)], duration=600)
    write_metrics(tmp_path, ranks=NODES * GPUS * 2, steps=30, slow_rank=5, partial=False)
    return tmp_path


def test_many_gpus_and_hosts_are_their_envelope(big):
    view = live.JobLive(str(big))
    first, seen = view.payload(None)
    assert sorted(first["charts"]) == ["cpu", "mem", "power", "temp"]
    for chart in ("power", "temp"):   # 24 GPUs > MAX_LINES: three lines
        assert sorted(first["charts"][chart]) == ["max", "mean", "min"]
        assert first["chart_notes"][chart] == f"min, mean and max over {NODES * GPUS} GPUs"
    assert "cpu" not in first["chart_notes"] and len(first["charts"]["cpu"]) == NODES   # 12 hosts: one line each
    power = first["charts"]["power"]
    lo, mid, hi = (np.array(power[k]["y"], float) for k in ("min", "mean", "max"))
    assert (lo <= mid + 1e-6).all() and (mid <= hi + 1e-6).all() and len(lo) == 601
    # the first sample: the GPUs' own readings, min and max of them
    rows = [r for h in range(NODES) for r in open(big / schema.MONITOR_DIR / schema.gpu_file(f"n{h:02d}"))
            if r[0].isdigit()]
    first_t = min(float(r.split(",")[0]) for r in rows)
    p0 = [float(r.split(",")[schema.GPU_COLUMNS.index("power_w")]) for r in rows if float(r.split(",")[0]) == first_t]
    assert (power["min"]["y"][0], power["max"]["y"][0]) == (round(min(p0), 2), round(max(p0), 2))
    assert abs(power["mean"]["y"][0] - sum(p0) / len(p0)) < 0.01


def test_many_ranks_are_a_summary_sent_when_it_changes(big):
    view = live.JobLive(str(big))
    first, seen = view.payload(None)
    n = NODES * GPUS * 2
    assert first["ranks_summary"]["ranks"] == n and first["ranks_summary"]["reporting"] == n
    assert len(first["ranks"]) == envelope.TOP_RANKS
    again, seen = view.payload(seen)
    assert "ranks" not in again and "ranks_summary" not in again and again["charts"] == {}
    assert len(json.dumps(again)) < 2000   # a page that has everything is sent almost nothing
    with open(big / "metrics" / "rank3.jsonl", "a") as f:   # rank 3 steps on
        f.write(json.dumps({"kind": "step", "rank": 3, "step": 99, "time_unix": 2e9}) + "\n")
    moved, _ = view.payload(seen)
    assert moved["ranks_summary"]["step_max"] == 99


def test_small_jobs_draw_every_line(tmp_path, monkeypatch):
    monkeypatch.setattr(live, "UPDATE_S", 0.0)
    write_run(tmp_path, [GpuSpec("n1", i) for i in range(4)], hosts=[HostSpec("n1")], duration=60)
    msg, _ = live.JobLive(str(tmp_path)).payload(None)
    assert sorted(msg["charts"]["power"]) == [f"n1 GPU{i}" for i in range(4)] and msg["chart_notes"] == {}


def test_a_bucket_is_drawn_once_every_node_had_time_to_report():
    env = envelope.Envelope(live.Series)
    env.add("a", np.array([100.2, 101.1]), np.array([1.0, 2.0]))
    env.add("b", np.array([100.7]), np.array([5.0]))
    env.settle(now=100.5 + envelope.SETTLE_S)     # bucket 100 is not settled yet
    assert env.lines["max"].t.size == 0
    env.settle(now=101.0 + envelope.SETTLE_S)     # now it is; 101 is not
    assert (env.lines["min"].y.tolist(), env.lines["mean"].y.tolist(), env.lines["max"].y.tolist()) == \
        ([1.0], [3.0], [5.0])
    env.add("c", np.array([100.9]), np.array([9.0]))   # too late for bucket 100: counted, left out
    env.settle(now=200.0)
    assert env.late == 1 and env.lines["max"].y.tolist() == [5.0, 2.0]
    assert env.note("GPU") == "min, mean and max over 3 GPUs; 1 late readings left out"


def test_alerts_are_sent_when_they_change(big):
    from hpclaunch.monitors.alert_log import JsonLog
    log = JsonLog(str(big / "alerts" / "node-n01.jsonl"))
    rec = {"id": "n01-1", "event": "raised", "rule": "xid", "severity": "critical", "node": "n01", "gpu": 0,
           "time_unix": 1.0, "message": "XID 79 on n01 GPU 0"}
    for i in range(live.MAX_ALERTS):
        log.append(dict(rec, id=f"n01-{i}", time_unix=float(i)))
    view = live.JobLive(str(big))
    first, seen = view.payload(None)
    assert len(first["alerts"]) == live.MAX_ALERTS
    again, seen = view.payload(seen)
    assert "alerts" not in again and len(json.dumps(again)) < 2000   # not 100 records a second a viewer
    log.append(dict(rec, event="resolved", time_unix=500.0))
    moved, _ = view.payload(seen)
    assert [a["event"] for a in moved["alerts"]].count("resolved") == 1 and len(moved["alerts"]) == live.MAX_ALERTS


def test_the_envelope_is_every_log_s_readings_whatever_their_header(big):
    """A large job's logs are parsed together, those of one header at a time: a log whose columns come
    in another order is its own parse, and every GPU's readings are in the envelope all the same."""
    from hpclaunch.reports import readers
    odd = big / schema.MONITOR_DIR / schema.gpu_file("n03")
    lines = odd.read_text().splitlines()
    order = list(reversed(schema.GPU_COLUMNS))
    cells = [dict(zip(schema.GPU_COLUMNS, ln.split(","))) for ln in lines[2:]]
    odd.write_text("\n".join([lines[0], ",".join(order)] + [",".join(c[k] for k in order) for c in cells]) + "\n")
    first, _ = live.JobLive(str(big)).payload(None)
    t = np.concatenate([readers.read_gpu_log(big / schema.MONITOR_DIR / schema.gpu_file(f"n{h:02d}")).col("time_unix")
                        for h in range(NODES)])
    p = np.concatenate([readers.read_gpu_log(big / schema.MONITOR_DIR / schema.gpu_file(f"n{h:02d}")).col("power_w")
                        for h in range(NODES)])
    buckets = np.floor(t)
    power = first["charts"]["power"]
    assert len(power["max"]["t"]) == np.unique(buckets).size
    for i, b in enumerate(np.unique(buckets)):
        assert power["max"]["y"][i] == round(p[buckets == b].max(), 2)
        assert power["min"]["y"][i] == round(p[buckets == b].min(), 2)
    assert first["chart_notes"]["power"] == f"min, mean and max over {NODES * GPUS} GPUs"


def test_a_long_chunk_of_a_rank_shows_its_newest_step_and_header(tmp_path, monkeypatch):
    """Past FEW_LINES new lines, a rank's chunk has its headers and its newest step record decoded, the
    rest counted by their text: the page shows what decoding every line would."""
    monkeypatch.setattr(live, "UPDATE_S", 0.0)
    (tmp_path / "metrics").mkdir()
    recs = [{"kind": "header", "rank": 2, "attempt": 0}]
    recs += [{"kind": "step", "rank": 2, "step": s, "loss": 1.0 / (s + 1), "time_unix": 100.0 + s} for s in range(20)]
    recs += [{"kind": "header", "rank": 2, "attempt": 1}]
    recs += [{"kind": "step", "rank": 2, "step": s, "loss": 0.5, "time_unix": 200.0 + s} for s in range(7)]
    recs += [{"kind": "eval", "rank": 2, "accuracy": 0.9}] * 12   # after the newest step: not steps
    text = "".join(json.dumps(r) + "\n" for r in recs) + "not json\n"
    (tmp_path / "metrics" / "rank2.jsonl").write_text(text)
    decoded = []
    real = live.readers.parse_jsonl
    monkeypatch.setattr(live.readers, "parse_jsonl", lambda lines: decoded.append(1) or real(lines))
    msg, _ = live.JobLive(str(tmp_path)).payload(None)
    (rank,) = msg["ranks"]
    assert (rank["step"], rank["attempt"], rank["records"], rank["time_unix"]) == (6, 1, 27, 206.0)
    assert len(decoded) == 2 + 14   # the headers, then back to the newest step: not the 41 lines
