"""XID errors in the report: read from the events files, per GPU and code, in JSON, text and HTML."""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth import GpuSpec, HostSpec, T0, write_events, write_run  # noqa: E402

from hpclaunch.reports import build_report, render  # noqa: E402


def _gpus(rep):
    return {(g["host"], g["index"]): g for g in rep.data["gpus"]}


def _xid(t, idx, code, count, ranks):
    return (t, "xid", {"gpu_index": idx, "uuid": f"GPU-n1-{idx:02d}", "ranks": ranks, "xid": code,
                       "xid_count": count, "since_unix": T0 + t - 1})


def _run(tmp_path):
    """n1: XIDs collected on both GPUs, XIDs on GPU 1; n2: a monitor from before XID collection."""
    specs = [GpuSpec(h, i, ranks=str(2 * k + i)) for k, h in enumerate(("n1", "n2")) for i in range(2)]
    write_run(tmp_path, specs, hosts=[HostSpec("n1"), HostSpec("n2")], duration=600)
    recs = [(0.5, "source_available", {"source": "nvml", "xid_events": [0, 1]}),
            _xid(100, 1, 79, 1, "1"), _xid(200, 1, 13, 2, "1"), _xid(200, 1, 13, 3, "1"),
            _xid(350, 1, 13, 4, "1")]
    write_events(tmp_path, "n1", recs, partial=_xid(400, 1, 31, 5, "1"))
    # a copy of the same file (rotated, copied back): every XID still counts once
    shutil.copy(tmp_path / "monitor" / "n1.events.jsonl", tmp_path / "monitor" / "n1.copy.events.jsonl")
    write_events(tmp_path, "n2", [(0.5, "source_available", {"source": "nvml"})])


def test_json_lists_xids_per_gpu_and_code_once_each(tmp_path):
    _run(tmp_path)
    rep = build_report(tmp_path)
    g = _gpus(rep)
    assert g[("n1", 1)]["xids"] == [
        {"xid": 13, "count": 3, "first_unix": T0 + 200, "last_unix": T0 + 350},
        {"xid": 79, "count": 1, "first_unix": T0 + 100, "last_unix": T0 + 100}]
    assert g[("n1", 0)]["xids"] == []                          # collected, none
    assert g[("n2", 0)]["xids"] is None and g[("n2", 1)]["xids"] is None   # not collected: null, not []
    w = rep.data["warnings"]
    assert "n1/gpu1: XID errors 13 (x3), 79 (x1) (see gpus[].xids)" in w
    assert any("XID errors not collected for 2 GPU(s) (n2/gpu0, n2/gpu1)" in x for x in w)
    assert "events: 2 line(s) with XID data skipped (unterminated or unparsable)" in w  # the cut last lines
    doc = json.loads(render(rep, "json"))
    assert doc["schema"] == "hpclaunch.report/1"               # adding a key keeps the version
    assert doc["gpus"][1]["xids"][0]["xid"] == 13


def test_text_and_html_show_the_xids(tmp_path):
    _run(tmp_path)
    rep = build_report(tmp_path)
    txt = render(rep, "text", width=160)
    assert "XID errors (driver error reports)" in txt
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0 + 100))
    row = next(ln for ln in txt.splitlines() if "GPU has fallen off the bus" in ln)
    assert row.split()[:3] == ["n1/1", "1", "79"] and row.count(when) == 2   # first and last, UTC
    assert "XID errors: 4 on 1 of 2 GPU(s) with XID collection; not collected on 2 GPU(s)" in txt
    html = render(rep, "html")
    assert "<h2>XID errors</h2>" in html and "GPU has fallen off the bus" in html
    assert html.count("graphics engine exception") == 1


def test_collection_unavailable_or_stopped_is_a_warning(tmp_path):
    write_run(tmp_path, [GpuSpec("n1", 0, ranks="0"), GpuSpec("n1", 1, ranks="1")], duration=300)
    write_events(tmp_path, "n1", [
        (0.5, "source_unavailable", {"source": "nvml", "capability": "xid_events", "gpu_index": 1,
                                     "reason": "the driver offers no XID events for this GPU (event types 0x3)"}),
        (0.6, "source_available", {"source": "nvml", "xid_events": [0]}),
        (120, "source_unavailable", {"source": "nvml", "capability": "xid_events",
                                     "reason": "nvmlEventSetWait_v2 failed: NVMLError_Unknown: Unknown Error; "
                                               "XID collection stopped"})])
    rep = build_report(tmp_path)
    g = _gpus(rep)
    assert g[("n1", 0)]["xids"] == [] and g[("n1", 1)]["xids"] is None
    w = rep.data["warnings"]
    assert "n1/gpu1: XID events: the driver offers no XID events for this GPU (event types 0x3)" in w
    assert any(x.startswith("n1: XID events: nvmlEventSetWait_v2 failed") for x in w)
    assert "XID errors: none on 1 GPU(s) with XID collection; not collected on 1 GPU(s)" in render(rep, "text")


def test_collection_resumed_after_a_stop_names_the_gap(tmp_path):
    write_run(tmp_path, [GpuSpec("n1", 0, ranks="0")], duration=300)
    write_events(tmp_path, "n1", [
        (0.5, "source_available", {"source": "nvml", "xid_events": [0]}),
        (120, "source_unavailable", {"source": "nvml", "capability": "xid_events",
                                     "reason": "nvmlEventSetWait_v2 failed: NVMLError_Unknown: Unknown Error; "
                                               "XID collection stopped"}),
        (150, "source_available", {"source": "nvml", "capability": "xid_events", "xid_events": [0],
                                   "resumed_after_s": 30.0, "stopped_unix": T0 + 120}),
        _xid(200, 0, 31, 2, "0"),
        (210, "xid", {**_xid(210, 0, 43, 3, "0")[2], "gpu_instance_id": 2, "compute_instance_id": 0}),
        (220, "xid", {**_xid(220, 0, 43, 4, "0")[2], "gpu_instance_id": 1, "compute_instance_id": 0})])
    rep = build_report(tmp_path)
    assert _gpus(rep)[("n1", 0)]["xids"] == [
        {"xid": 31, "count": 1, "first_unix": T0 + 200, "last_unix": T0 + 200},
        {"xid": 43, "count": 2, "first_unix": T0 + 210, "last_unix": T0 + 220, "mig_instances": ["1/0", "2/0"]}]
    assert any("n1/0 (MIG 1/0, 2/0)" in ln and "GPU stopped processing" in ln
               for ln in render(rep, "text", width=200).splitlines())
    def when(t):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))
    gap = [x for x in rep.data["warnings"] if "collected again" in x]
    assert gap == [f"n1: XID events collected again from {when(T0 + 150)} UTC; none were collected for 30 s "
                   f"before (from {when(T0 + 120)} UTC)"], rep.data["warnings"]


def test_runs_from_before_xid_collection_still_read(tmp_path):
    """Old GPU files (no xid_count column) and no XID records: xids null, said once, nothing else."""
    write_run(tmp_path, [GpuSpec("n1", 0, ranks="0")], duration=300, old_gpu_header=True)
    rep = build_report(tmp_path)
    assert _gpus(rep)[("n1", 0)]["xids"] is None
    assert [w for w in rep.data["warnings"] if "XID" in w] == [
        "XID errors not collected for 1 GPU(s) (n1/gpu0): no XID collection in their monitor logs"]
    assert not [w for w in rep.data["warnings"] if "columns absent" in w or "schema" in w]
    assert "XID errors: not collected" in render(rep, "text")
