"""The goodput report (reports/goodput.py, docs/report-schema.md "Goodput"): a job with a node death and
a hang, built from the lines the job runtime and train_entry write, every second in one category;
its text, JSON and HTML; the fleet's sums per partition and month; and the failure rate a submission
hands the job's cadence from the goodput ledger."""
import json
import os

import pytest
from hlcli import hl

from hpclaunch.reports import goodput, goodput_fleet
from hpclaunch.reports.goodput_render import render
from hpclaunch.runs import goodput as run_goodput
from hpclaunch.runs.registry import Registry
from hpclaunch.runtime import cadence

T0 = 1_800_000_000


def write_job(run_dir):
    """Submitted at T0; attempt 0 starts at +10 on n1,n2 (spare n3), steps from +30 at 1 s a step,
    checkpoint at step 20 (2 s); n2 dies at +62.5 (last heartbeat), verdict at +70, fenced, attempt 1
    on n1,n3 from +72, resumes from step 20 (first record +90: steps 21..), hangs after step 60 at
    +129.5, verdict +150, attempt 2 from +152 resumes from step 40 (a checkpoint there at +110),
    runs to step 100 at +215, ends at +220; the job ends at +221."""
    (run_dir / ".hpclaunch").mkdir(parents=True)
    (run_dir / "metrics").mkdir()
    state = [
        (10, 0, "start host=n1 nodes=2 head=n1 port=1"), (10, 0, "launch nodes=n1,n2 spares=n3 checkpoint_interval=20"),
        (70, 0, f"verdict verdict=node node=n2 since={T0 + 62.5}"), (70, 0, "fence node=n2 reason=node"),
        (71, 0, "end rc=137 outcome=restart reason=node"),
        (72, 1, "start host=n1 nodes=2 head=n1 port=2 restart=1 reason=node"),
        (72, 1, "launch nodes=n1,n3 spares= checkpoint_interval=20"),
        (150, 1, f"verdict verdict=hang rank=1 node=n3 bound_s=20 quiet_s=20.5 state=T since={T0 + 129.5} "
                 f"stacks={run_dir}/hangs/attempt1-1"),
        (151, 1, "end rc=137 outcome=restart reason=hang"),
        (152, 2, "start host=n1 nodes=2 head=n1 port=3 restart=2 reason=hang"),
        (152, 2, "launch nodes=n1,n3 spares= checkpoint_interval=20"),
        (220, 2, "end rc=0 outcome=completed")]
    (run_dir / ".hpclaunch" / "state").write_text("".join(f"{T0 + t} attempt={a} {w}\n" for t, a, w in state))
    recs = [{"kind": "header", "attempt": 0}]
    recs += [{"kind": "step", "time_unix": T0 + 30 + i, "step": i + 1, "steps": 1, "step_time_s": 1.0}
             for i in range(30)]                                   # steps 1..30 end at +30..+59 ... see below
    recs = [r for r in recs if r["kind"] == "header" or r["time_unix"] <= T0 + 60]
    recs.append({"kind": "checkpoint", "time_unix": T0 + 50, "step": 20, "seconds": 2.0})
    recs.append({"kind": "header", "attempt": 1, "resumed_step": 20})
    recs += [{"kind": "step", "time_unix": T0 + 90 + i, "step": 21 + i, "steps": 1, "step_time_s": 1.0}
             for i in range(40)]                                   # steps 21..60 at +90..+129
    recs.append({"kind": "checkpoint", "time_unix": T0 + 110, "step": 40, "seconds": 2.0})
    recs.append({"kind": "header", "attempt": 2, "resumed_step": 40})
    recs += [{"kind": "step", "time_unix": T0 + 156 + i, "step": 41 + i, "steps": 1, "step_time_s": 1.0}
             for i in range(60)]                                   # steps 41..100 at +156..+215
    (run_dir / "metrics" / "rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


FACTS = {"id": "42", "name": "gp", "partition": "debug", "submit_time": T0, "end_time": T0 + 221, "nodes": 2,
         "gpus_per_node": 4, "spare_nodes": 1}


def test_the_times_add_up_to_the_wall_time_with_a_node_death_and_a_hang(tmp_path):
    write_job(tmp_path)
    doc = goodput.build(str(tmp_path), FACTS)
    sec = doc["seconds"]
    assert doc["wall_s"] == 221 and doc["run_s"] == 211
    assert sum(sec.values()) == pytest.approx(221, abs=1e-6)
    # queued: submission to the first start
    assert sec["queued"] == pytest.approx(10)
    # starting: +10 to the first step's start (+29); recovering: the verdicts to the next first steps
    assert sec["starting"] == pytest.approx(19)
    assert sec["detecting"] == pytest.approx((70 - 62.5) + (150 - 129.5))
    assert sec["recovering"] == pytest.approx((89 - 70) + (155 - 150))
    # recomputing: attempt 1 redid steps 21..30 (+80..+99: 10 s, the first one's second starting at +89)
    # and then the 3.5 s attempt 0 trained unrecorded after its last record (+59) until n2 died (+62.5);
    # attempt 2 redid 41..60 (+155..+175: 20 s) and the 0.5 s after step 60's record (+129) to the hang
    assert sec["recomputing"] == pytest.approx(10 + 3.5 + 20 + 0.5)
    assert sec["checkpointing"] == pytest.approx(4)
    assert sec["ending"] == pytest.approx(221 - 215)
    assert sec["productive"] == pytest.approx(221 - 10 - 19 - 28 - 24 - 34 - 4 - 6)
    assert doc["ettr"] == pytest.approx(sec["productive"] / 211, abs=1e-4)
    # lost GPU-hours: 2 nodes x 4 GPUs, per cause; the spare's GPUs held for the whole run
    node = (70 - 62.5) + (89 - 70) + 10 + 3.5
    hang = (150 - 129.5) + (155 - 150) + 20 + 0.5
    assert doc["lost_gpu_hours"] == {"hang": pytest.approx(hang * 8 / 3600, abs=1e-6),
                                     "node_failure": pytest.approx(node * 8 / 3600, abs=1e-6),
                                     "spare_nodes": pytest.approx(211 * 4 / 3600, abs=1e-6)}
    assert [a["failure"] for a in doc["attempts"]] == ["node_failure", "hang", None]
    assert doc["attempts"][0]["fenced"] == ["n2"] and doc["attempts"][1]["nodes"] == ["n1", "n3"]
    assert [(i["cause"], i["detect_s"]) for i in doc["incidents"]] == [("node_failure", 7.5), ("hang", 20.5)]
    # the timeline is contiguous from the submission to the end
    tl = doc["timeline"]
    assert tl[0]["start"] == T0 and tl[-1]["end"] == T0 + 221
    assert all(a["end"] == pytest.approx(b["start"]) for a, b in zip(tl, tl[1:]))


def test_renderings(tmp_path):
    write_job(tmp_path)
    doc = goodput.build(str(tmp_path), FACTS)
    text = render(doc, "text")
    assert "ETTR" in text and "dead nodes" in text and "hung ranks rank 1 on n3, detected in 20.5 s" in text
    assert "fenced n2" in text
    assert json.loads(render(doc, "json")) == doc
    page = render(doc, "html")
    assert page.startswith("<!doctype html>") and "<svg" in page and "hung ranks" in page


def test_a_name_is_escaped_in_the_page(tmp_path):
    write_job(tmp_path)
    page = render(goodput.build(str(tmp_path), dict(FACTS, name="<script>x</script>")), "html")
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page


def test_a_job_the_scheduler_requeued_without_an_end_line_charges_the_gap(tmp_path):
    (tmp_path / ".hpclaunch").mkdir()
    (tmp_path / ".hpclaunch" / "state").write_text(
        f"{T0} attempt=0 start host=n1 nodes=2\n{T0 + 90} attempt=1 start host=n1 nodes=2\n"
        f"{T0 + 100} attempt=1 end rc=0 outcome=completed\n")
    doc = goodput.build(str(tmp_path), {"nodes": 2})
    assert sum(doc["seconds"].values()) == pytest.approx(100)
    assert doc["seconds"]["recovering"] == pytest.approx(90) and doc["incidents"][0]["cause"] == "unrecorded"
    assert any("no step records" in w for w in doc["warnings"])


def test_the_fleet_sums_per_partition_and_month(tmp_path):
    write_job(tmp_path)
    s = goodput.summary(goodput.build(str(tmp_path), FACTS))
    fleet = goodput_fleet.build([("debug", s), ("debug", s), ("gpu", s), (None, {"format": 99})])
    assert fleet["jobs"] == 3 and [(r["partition"], r["jobs"]) for r in fleet["rows"]] == [("debug", 2), ("gpu", 1)]
    row = fleet["rows"][0]
    assert row["month"] == "2027-01" and row["failures"] == {"node_failure": 2, "hang": 2}
    assert row["seconds"]["recomputing"] == pytest.approx(2 * 34)
    assert row["failures_per_node_hour"] == pytest.approx(2 / (2 * 211 * 2 / 3600), rel=1e-5)
    assert "debug" in render(fleet, "text") and "<svg" in render(fleet, "html")


def test_the_failure_rate_a_submission_hands_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCLAUNCH_HOME", str(tmp_path / "home"))
    reg = Registry()
    assert run_goodput.failure_rate(reg, "debug") == pytest.approx(cadence.DEFAULT_RATE)   # no history
    write_job(tmp_path / "run")
    rec = reg.add(backend="slurm", cluster="c", job_id="42", name="gp", run_dir=str(tmp_path / "run"),
                  partition="debug", nodes=2, resolved={"resources": {"nodes": 2, "gpus_per_node": 4, "spare_nodes": 1}})
    reg.update_state(rec.key, "COMPLETED")
    rec = reg.get(rec.key)
    s = run_goodput.remember(reg, rec)
    assert s["failures"] == {"node_failure": 1, "hang": 1}
    assert reg.node_failures("debug", 0) == (1, pytest.approx(s["node_hours"]))
    got = run_goodput.failure_rate(reg, "debug", now=T0 + 3600)
    assert got == pytest.approx((cadence.DEFAULT_RATE * cadence.PRIOR_NODE_HOURS + 1)
                                / (cadence.PRIOR_NODE_HOURS + s["node_hours"]))
    assert run_goodput.failure_rate(reg, "gpu", now=T0 + 3600) == pytest.approx(cadence.DEFAULT_RATE)


def test_report_goodput_of_a_local_job(tmp_path, hpc_home):
    """A real local job: the command's text and JSON; its times add up to its wall time."""
    job = tmp_path / "job.yaml"
    job.write_text("name: gp\ncommand: [python, -c, 'import time; time.sleep(1)']\nmonitor: {interval: 0}\n")
    hl("submit", str(job), "--wait", cwd=str(tmp_path))
    out = hl("report", "gp", "--goodput", "--format", "json", cwd=str(tmp_path)).stdout
    doc = json.loads(out)
    assert doc["schema"] == "hpclaunch.goodput/1" and doc["attempts"][0]["outcome"] == "completed"
    assert sum(doc["seconds"].values()) == pytest.approx(doc["wall_s"], rel=0.01)
    text = hl("report", "gp", "--goodput", cwd=str(tmp_path)).stdout
    assert "where the time went" in text
    fleet = hl("report", "--since", "1d", "--goodput", "--format", "json", cwd=str(tmp_path)).stdout
    assert json.loads(fleet)["jobs"] == 1
