"""What hpclaunch says of a job's attempts, its whole elapsed time and why it waits (issue 45, items
2-5 and 7): from run directories written as the batch script and the scheduler write them, with the
backend faked only where Slurm's answer is the input."""
import json
import os
import time

import pytest

from hpclaunch.launchers.backends.base import AttemptRecord, JobStatus, State
from hpclaunch.reports import attempts as reader
from hpclaunch.runs import attempts as run_attempts
from hpclaunch.runs import jobs, progress

T0 = 1_790_000_000.0


def run_dir_with(tmp_path, state_lines, ranks=None, name="run"):
    run = tmp_path / name
    (run / ".hpclaunch").mkdir(parents=True)
    (run / ".hpclaunch" / "state").write_text("".join(line + "\n" for line in state_lines))
    for attempt, rows in (ranks or {}).items():
        folder = run / "logs" / f"attempt{attempt}"
        folder.mkdir(parents=True)
        (folder / "ranks.tsv").write_text("".join(f"{r}\t{h}\t{100 + r}\n" for r, h in rows))
    return str(run)


def rec(job_id, state, start, end, nodes, code=0):
    return AttemptRecord(job_id, State(state), code, start, end, None if end is None else end - start, nodes)


def test_every_attempt_with_its_cause_and_nodes_whoever_requeued_it(tmp_path):
    """Attempt 0 asked to be requeued (exit 75, hpclaunch requeued it); a node failed under attempt 1
    (its script wrote no end) and Slurm requeued it; attempt 2 completed. Only the scheduler knows
    attempt 1's cause and its nodes."""
    run = run_dir_with(tmp_path, [
        f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1", f"{T0 + 60:.0f} attempt=0 end rc=75 outcome=requeued",
        f"{T0 + 75:.0f} attempt=1 start host=c1 nodes=2 head=c1 port=1",
        f"{T0 + 160:.0f} attempt=2 start host=c2 nodes=2 head=c2 port=1", f"{T0 + 230:.0f} attempt=2 end rc=0 outcome=completed",
    ], ranks={0: [(0, "c1"), (1, "c2")], 1: [(0, "c1"), (1, "c2")], 2: [(0, "c2"), (1, "c3")]})
    assert run_attempts.record(run, [rec("7", "REQUEUED", T0 - 2, T0 + 61, "c[1-2]"),
                                     rec("7", "NODE_FAIL", T0 + 72, T0 + 130, "c[1-2]"),
                                     rec("7", "COMPLETED", T0 + 158, T0 + 231, "c[2-3]")])
    got = reader.attempts(run)
    assert [(a["attempt"], a["state"], a["nodes"], a["cause"]) for a in got] == [
        (0, "REQUEUED", "c[1-2]", "step exit code 75: hpclaunch requeued it"),
        (1, "NODE_FAIL", "c[1-2]", "a node failed; Slurm requeued it"),
        (2, "COMPLETED", "c[2-3]", "completed")]
    assert got[1]["end_unix"] == T0 + 130 and got[1]["elapsed_s"] == 58 and got[1]["outcome"] is None
    assert reader.total_elapsed(got, running=False) == T0 + 230 - (T0 - 2)
    # the same answer again writes nothing; the file is the reader's
    assert not run_attempts.record(run, [rec("7", "REQUEUED", T0 - 2, T0 + 61, "c[1-2]"),
                                         rec("7", "NODE_FAIL", T0 + 72, T0 + 130, "c[1-2]"),
                                         rec("7", "COMPLETED", T0 + 158, T0 + 231, "c[2-3]")])
    assert json.load(open(os.path.join(run, ".hpclaunch", "attempts.json")))["schema"] == "hpclaunch.attempts/1"


def test_restarts_inside_the_allocation_are_attempts_with_their_cause_and_nodes(tmp_path):
    """Issue 45 item 2 with a spare (docs/recovery.md): a rank hung, then a node died; the job
    runtime restarted the step inside one allocation each time. Each restart is an attempt whose
    cause names the hung rank or the dead node and whose nodes are its ranks' hosts, not the
    allocation's (spare included) that the scheduler's one row names."""
    run = run_dir_with(tmp_path, [
        f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1",
        f"{T0 + 1:.0f} attempt=0 launch nodes=c1,c2 spares=c3 checkpoint_interval=5",
        f"{T0 + 40:.0f} attempt=0 verdict verdict=hang rank=1 node=c2 bound_s=10 quiet_s=11 state=T since=1 stacks=/x",
        f"{T0 + 45:.0f} attempt=0 end rc=137 outcome=restart reason=hang",
        f"{T0 + 45:.0f} attempt=1 start host=c1 nodes=2 head=c1 port=2 restart=1 reason=hang",
        f"{T0 + 90:.0f} attempt=1 verdict verdict=node node=c2 since=1",
        f"{T0 + 95:.0f} attempt=1 fence node=c2 reason=node",
        f"{T0 + 95:.0f} attempt=1 end rc=137 outcome=restart reason=node",
        f"{T0 + 96:.0f} attempt=2 start host=c1 nodes=2 head=c1 port=3 restart=2 reason=node",
        f"{T0 + 150:.0f} attempt=2 end rc=0 outcome=completed",
    ], ranks={0: [(0, "c1"), (1, "c2")], 1: [(0, "c1"), (1, "c2")], 2: [(0, "c1"), (1, "c3")]})
    run_attempts.record(run, [rec("9", "COMPLETED", T0 - 1, T0 + 152, "c[1-3]")])
    got = reader.attempts(run)
    assert [(a["attempt"], a["nodes"], a["cause"]) for a in got] == [
        (0, "c1,c2", "rank 1 on c2 hung: hpclaunch restarted the step inside the allocation"),
        (1, "c1,c2", "node c2 failed (fenced): hpclaunch restarted the step inside the allocation"),
        (2, "c1,c3", "completed")]
    assert got[0]["elapsed_s"] == 46 and got[0]["state"] is None and got[1]["fenced"] == ["c2"]
    assert got[0]["hung"] == {"rank": "1", "node": "c2"}
    assert "on c1,c2: node c2 failed (fenced)" in reader.attempt_line(got[1])


def test_too_few_healthy_nodes_left_requeues_without_the_dead_one(tmp_path):
    run = run_dir_with(tmp_path, [
        f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1",
        f"{T0 + 30:.0f} attempt=0 fence node=c2 reason=node",
        f"{T0 + 30:.0f} attempt=0 end rc=137 outcome=requeued reason=node exclude=c2",
        f"{T0 + 50:.0f} attempt=1 start host=c1 nodes=2 head=c1 port=1",
        f"{T0 + 90:.0f} attempt=1 end rc=0 outcome=completed"], ranks={1: [(0, "c1"), (1, "c3")]})
    got = reader.attempts(run)
    assert got[0]["cause"] == "node c2 failed (fenced): step exit code 137: hpclaunch requeued it without c2"
    assert got[1]["nodes"] == "c1,c3"


def test_a_resubmission_after_a_node_failure_keeps_the_first_jobs_attempts(tmp_path):
    run = run_dir_with(tmp_path, [f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1",
                                  f"{T0 + 100:.0f} attempt=1 start host=c2 nodes=1 head=c2 port=1",
                                  f"{T0 + 150:.0f} attempt=1 end rc=0 outcome=completed"])
    run_attempts.record(run, [rec("7", "NODE_FAIL", T0 - 1, T0 + 40, "c[1-2]")])
    run_attempts.record(run, [rec("9", "COMPLETED", T0 + 99, T0 + 151, "c2")])     # the new job id
    got = reader.attempts(run)
    assert [(a["attempt"], a["job_id"], a["cause"]) for a in got] == [
        (0, "7", "a node failed; hpclaunch resubmitted it as job 9"), (1, "9", "completed")]


def test_without_the_schedulers_record_the_scripts_alone(tmp_path):
    """The local backend, or Slurm without accounting: the batch script's lines and the rank hosts;
    a Ray job's one driver on a 2-node allocation says so."""
    run = run_dir_with(tmp_path, [f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1"], ranks={0: [(0, "c1")]})
    (a,) = reader.attempts(run)
    assert (a["nodes"], a["end_unix"], a["cause"], a["job_id"]) == ("2 nodes (ranks on c1)", None, "", None)
    assert reader.total_elapsed([a], running=True, now=T0 + 157) == 157


def test_damaged_records_are_read_as_far_as_they_make_sense(tmp_path):
    run = run_dir_with(tmp_path, ["garbage", f"{T0:.0f} attempt=x start", f"{T0:.0f} attempt=0 start host=h nodes=1",
                                  f"{T0 + 5:.0f} attempt=0 end rc=zz outcome=failed"])
    (tmp_path / "run" / ".hpclaunch" / "attempts.json").write_text('{"schema": "hpclaunch.attempts/1", "attempts": [7, {"job_id": 3}]}')
    (a,) = reader.attempts(run)
    assert (a["attempt"], a["exit_code"], a["cause"]) == (0, None, "failed")


def test_status_counts_a_completing_attempt_as_itself_not_the_next(tmp_path, hpc_home, monkeypatch):
    """Slurm counts the restart when the job is requeued, while the attempt that asked for it is still
    COMPLETING: `--wait` printed that attempt as the next one (issue 45, item 5)."""
    from hpclaunch.runs.registry import Registry

    run = run_dir_with(tmp_path, [f"{T0:.0f} attempt=0 start host=c1 nodes=1 head=c1 port=1",
                                  f"{T0 + 9:.0f} attempt=0 end rc=75 outcome=requeued"])
    record = Registry().add(backend="slurm", cluster="c", job_id="41", name="rq", run_dir=run)
    answers = iter([JobStatus(State.COMPLETING, None, "0:09", "c1", "None", 2, "squeue"),
                    JobStatus(State.PENDING, None, "0:00", "", "BeginTime", 2, "squeue")])

    class Fake:
        def status(self, ref):
            return next(answers)

    monkeypatch.setattr(jobs, "get_backend", lambda name: Fake())
    job = jobs.Job(record)
    assert job.status().attempts == 1          # attempt 0 completing
    assert job.status().attempts == 2          # attempt 1 waiting to start


def test_the_whole_jobs_elapsed_time_and_a_line_per_attempt(tmp_path, hpc_home, monkeypatch, run_cli):
    """`status` shows the job's elapsed time from its first start (157 s), not its last attempt's (18 s),
    and each attempt; --json has them too."""
    from hpclaunch.runs.registry import Registry

    now = time.time()
    run = run_dir_with(tmp_path, [f"{now - 157:.0f} attempt=0 start host=c1 nodes=1 head=c1 port=1",
                                  f"{now - 40:.0f} attempt=0 end rc=75 outcome=requeued",
                                  f"{now - 18:.0f} attempt=1 start host=c2 nodes=1 head=c2 port=1"])
    Registry().add(backend="slurm", cluster="c", job_id="42", name="long", run_dir=run)

    class Fake:
        def status(self, ref):
            return JobStatus(State.RUNNING, None, "0:18", "c2", "None", 2, "squeue",
                             history=[rec("42", "REQUEUED", now - 158, now - 39, "c1"),
                                      AttemptRecord("42", State.RUNNING, None, now - 19, None, None, "c2")])

        statuses = None

    monkeypatch.setattr(jobs, "get_backend", lambda name: Fake())
    code, out, _ = run_cli("status", "42")
    assert code == 0
    head, first, second = out.splitlines()
    assert "RUNNING" in head and " attempt 1 " in head and "elapsed 2:38 (2 attempts; this one 0:1" in head, out
    assert first.strip().startswith("attempt 0: job 42") and "(1:59) on c1: step exit code 75: hpclaunch requeued it" in first
    assert second.strip().startswith("attempt 1: job 42") and "-> now" in second and "on c2" in second
    code, out, _ = run_cli("status", "42", "--json")
    doc = json.loads(out)
    assert 157 <= doc["elapsed_s"] <= 160 and doc["elapsed"] == "0:18" and doc["attempts"] == 2
    assert [a["cause"] for a in doc["attempt_history"]] == ["step exit code 75: hpclaunch requeued it", ""]


def test_a_pending_jobs_reason_and_expected_start_in_words():
    now = 1_800_000_000.0
    st = JobStatus(State.PENDING, reason="Resources", expected_start=now + 180)
    text = progress.pending_text(st, now)
    assert text.startswith("Resources: the nodes it needs are in use by other jobs; expected to start ")
    assert text.endswith("(in 3 min)")
    assert progress.pending_text(JobStatus(State.PENDING, reason="Priority", expected_start=now - 60), now) == \
        "Priority: jobs of higher priority are ahead of it"                  # a start already past: none
    assert progress.reason_text("QOSMaxJobsPerUserLimit") == "QOSMaxJobsPerUserLimit: a limit of its account or QOS"
    assert progress.reason_text("the local runner waits for 2 GPUs") == "the local runner waits for 2 GPUs"
    assert progress.pending_text(JobStatus(State.RUNNING, reason="None"), now) == ""


@pytest.mark.parametrize("seconds,text", [(7, "0:07"), (157, "2:37"), (3757, "1:02:37"), (2 * 86400 + 3757, "2-01:02:37"),
                                          (None, "-")])
def test_durations_read_as_slurms(seconds, text):
    assert run_attempts.duration_text(seconds) == text


def test_the_report_asks_the_scheduler_once_for_the_attempts_it_names(tmp_path, hpc_home, monkeypatch, run_cli):
    """A node failed under attempt 0 and Slurm requeued the job; nobody ran status since: `report JOB`
    asks once, so the report names the cause and the nodes."""
    from hpclaunch.runs.registry import Registry

    run = run_dir_with(tmp_path, [f"{T0:.0f} attempt=0 start host=c1 nodes=2 head=c1 port=1",
                                  f"{T0 + 80:.0f} attempt=1 start host=c2 nodes=2 head=c2 port=1",
                                  f"{T0 + 99:.0f} attempt=1 end rc=0 outcome=completed"])
    os.makedirs(os.path.join(run, "monitor"))
    Registry().add(backend="slurm", cluster="c", job_id="43", name="nf", run_dir=run)

    class Fake:
        def status(self, ref):
            return JobStatus(State.COMPLETED, 0, "0:19", "c[2-3]", "", 2, "sacct", end_time=T0 + 100,
                             history=[rec("43", "NODE_FAIL", T0 - 1, T0 + 50, "c[1-2]"),
                                      rec("43", "COMPLETED", T0 + 79, T0 + 100, "c[2-3]")])

    monkeypatch.setattr(jobs, "get_backend", lambda name: Fake())
    code, out, err = run_cli("report", "43", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["job"]["attempts"] == 2 and doc["job"]["elapsed_s"] == 100   # first start (Slurm's) to last end (the script's)
    assert [(a["state"], a["nodes"], a["cause"]) for a in doc["attempt_history"]] == [
        ("NODE_FAIL", "c[1-2]", "a node failed; Slurm requeued it"), ("COMPLETED", "c[2-3]", "completed")]


def test_a_node_failure_is_the_cause_even_when_the_batch_shell_saw_its_step_fail_first():
    """The batch shell (on the surviving node) saw the step die of the node's loss (gloo's abort, 134)
    and recorded `failed`; sacct says NODE_FAIL and Slurm requeued the job (seen on the 3-node test)."""
    from hpclaunch.reports.attempts import cause_of
    first = {"state": "NODE_FAIL", "outcome": "failed", "exit_code": 134, "job_id": "3", "end_unix": 2.0}
    assert cause_of(first, {"job_id": "3", "state": "COMPLETED"}) == "a node failed; Slurm requeued it"
    failed = dict(first, state="FAILED")
    assert cause_of(failed, None) == "step exit code 134: failed"
