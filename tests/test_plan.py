"""The plan is in no scheduler's terms; the Slurm backend translates it (dependencies, exclusions,
a resubmission), and the runs layer hands every backend the same typed plan."""
from __future__ import annotations

import os
from dataclasses import fields, is_dataclass, replace

from hpclaunch.launchers.backends import slurm_script
from hpclaunch.launchers.backends.base import Capability, JobRef, JobStatus, Rerun, State
from hpclaunch.launchers.plan import build_plan
from hpclaunch.runs import jobs as jobs_module
from hpclaunch.runs.registry import Registry
from hpclaunch.spec.loading import resolve_job

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "golden", "job.yaml")


def _plan(*overrides):
    return build_plan(resolve_job(JOB, ["profile=testcluster", *overrides]))


def _words(value) -> list:
    """Every string in a record, its sub-records and tuples."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (tuple, list)):
        return [w for v in value for w in _words(v)]
    if is_dataclass(value):
        return [w for f in fields(value) for w in _words(getattr(value, f.name))]
    return []


def test_the_plan_holds_no_sbatch_option_and_slurm_reads_it_into_directives():
    plan = _plan("slurm.partition=debug", "slurm.account=acct", "slurm.extra=[--reservation=maint]")
    assert plan.placement.partition == "debug" and plan.placement.account == "acct"
    # the only option-shaped words: the command's own and the job's pass-through option
    assert not [w for w in _words(replace(plan, command=())) if w.startswith("--") and w != "--reservation=maint"]
    assert not any(f.name in ("directives", "gpu_directive", "array", "partition") for f in fields(plan))
    request = slurm_script.prepare(plan)
    assert ("partition", "debug") in request.directives and ("account", "acct") in request.directives
    assert "#SBATCH --partition=debug\n" in request.script and "#SBATCH --reservation=maint\n" in request.script


def test_dependencies_are_kind_and_job_pairs_that_slurm_writes_as_one_flag():
    plan = replace(_plan(), after=(("afterok", "12"), ("afterany", "13")))
    assert slurm_script.dependency(plan) == ["--dependency=afterok:12,afterany:13"]
    # a sweep's later chunk waits on the one before it too
    assert slurm_script.dependency(plan, ("afterany:14",)) == ["--dependency=afterok:12,afterany:13,afterany:14"]
    assert slurm_script.dependency(_plan()) == []


def test_a_rerun_is_slurms_exclude_export_and_output():
    rerun = Rerun("#!/bin/bash\n", "/runs/j-7", ("c2", "c3"), 2)
    assert slurm_script.rerun_flags(rerun) == [
        "--exclude=c2,c3", "--export=ALL,HPCLAUNCH_RESUME_DIR=/runs/j-7,HPCLAUNCH_ATTEMPT_BASE=2",
        "--output=/runs/j-7/logs/slurm.out"]


class FakeNodeBackend:
    """A backend that knows of node failures: one node is down, a job pending on it."""

    name = "fakesched"
    capabilities = frozenset({Capability.NODE_FAILURES})

    def __init__(self):
        self.cancelled, self.reruns, self.released = [], [], []

    def status(self, ref):
        if ref.job_id == "100":
            return JobStatus(State.PENDING, nodes="", reason="ReqNodeNotAvail, UnavailableNodes:c2")
        return JobStatus(State.PENDING)

    def job_nodes(self, job_id):
        return "c[1-2]"

    def down_nodes(self, nodelist):
        return ["c2"]

    def cancel(self, ref):
        assert isinstance(ref, JobRef), ref   # not a bare id
        self.cancelled.append(ref.job_id)

    def resubmit(self, rerun, cwd):
        self.reruns.append((rerun, cwd))
        return "101"

    def release(self, ref, request=None, *, cwd=""):
        self.released.append(ref.job_id)

    def abandon(self, ids):
        pass


def _pending_job(tmp_path, fake, monkeypatch):
    run_dir = tmp_path / "runs" / "j-100"
    (run_dir / ".hpclaunch").mkdir(parents=True)
    (run_dir / "script.sbatch").write_text("#!/bin/bash\necho hi\n")
    reg = Registry()
    doc = {"requeue": {"max_attempts": 3}, "hpclaunch": {"submit_dir": str(tmp_path)}}
    rec = reg.add(backend="fakesched", cluster="c", job_id="100", name="j", run_dir=str(run_dir), resolved=doc)
    monkeypatch.setattr(jobs_module, "get_backend", lambda name=None: fake)
    monkeypatch.setattr("hpclaunch.runs.resubmit.get_backend", lambda name=None: fake)
    return jobs_module.Job(rec, reg), reg, rec, run_dir


def test_a_job_pending_on_a_down_node_is_cancelled_and_resubmitted_without_it(hpc_home, tmp_path, monkeypatch):
    fake = FakeNodeBackend()
    job, reg, rec, run_dir = _pending_job(tmp_path, fake, monkeypatch)
    job.wait(poll=0.01, timeout=0.05)
    assert fake.cancelled == ["100"]
    (rerun, cwd), = fake.reruns
    assert rerun == Rerun("#!/bin/bash\necho hi\n", str(run_dir), ("c2",), 1) and cwd == str(tmp_path)
    assert fake.released == ["101"]
    # the handle follows the new job, recorded on the backend it ran on (not as "slurm")
    assert (job.record.backend, job.record.job_id) == ("fakesched", "101")
    assert reg.get(rec.key).state == "NODE_FAIL"


def test_a_backend_that_declares_no_node_failures_is_not_asked_about_nodes(hpc_home, tmp_path, monkeypatch):
    fake = FakeNodeBackend()
    fake.capabilities = frozenset()   # it has the methods, but does not say so: they are not probed
    job, reg, rec, run_dir = _pending_job(tmp_path, fake, monkeypatch)
    job.wait(poll=0.01, timeout=0.05)
    assert fake.cancelled == [] and fake.reruns == [] and job.record.job_id == "100"


def test_a_split_sweep_chains_its_chunks_after_the_users_dependencies(tmp_path, monkeypatch):
    from hpclaunch.launchers.backends.slurm import SlurmBackend

    plan = _plan("sweep={parameters: {i: [1, 2, 3, 4, 5]}, parallelism: 1}", "env={SEED: '{i}'}")
    plan = replace(plan, after=(("afterok", "7"),))
    be = SlurmBackend()
    calls = []
    monkeypatch.setattr(be, "max_array_size", lambda: 2)
    monkeypatch.setattr(be, "sbatch", lambda script, args, cwd: calls.append(args) or str(10 + len(calls)))
    assert be.queue(be.prepare(plan), cwd=str(tmp_path)) == [("11", 2), ("12", 2), ("13", 1)]
    deps = [[a for a in args if a.startswith("--dependency=")] for args in calls]
    assert deps == [["--dependency=afterok:7"], ["--dependency=afterok:7,afterany:11"],
                    ["--dependency=afterok:7,afterany:12"]]
    assert [a for a in calls[2] if a.startswith(("--array=", "--export="))] == [
        "--array=0%1", "--export=ALL,HPCLAUNCH_ARRAY_OFFSET=4,HPCLAUNCH_SWEEP_ID=11"]
    assert all(args[-1] == "--hold" for args in calls)
