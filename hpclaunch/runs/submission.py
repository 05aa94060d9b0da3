"""Submitting a job: validate, render, make the run directory, queue it, record it.

Order matters so that nothing is lost or half-done: Slurm holds the job until its run
directory and registry row exist; any failure before release cancels the held job, and the
registry only ever holds jobs that were queued.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import replace
from typing import Optional, Sequence

from hpclaunch.common.atomic import file_in_the_way, make_private_dirs, write_atomic
from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem
from hpclaunch.launchers.backends.choice import job_backend, names
from hpclaunch.launchers.backends.base import Capability, JobRef
from hpclaunch.launchers.plan import DEPENDENCY_KINDS, Plan, build_plan
from hpclaunch.runs import alerts
from hpclaunch.runs.goodput import failure_rate
from hpclaunch.runs.jobs import Job
from hpclaunch.runs.registry import Registry
from hpclaunch.spec.loading import Resolved, resolve_job
from hpclaunch.spec.typedload import SourceMap, to_plain
from hpclaunch.spec.yamlio import display_path, dump_yaml

class IsStudy(HpclaunchError):
    """submit() of a study, which runs through runs/tuning.py (the CLI's submit sends it there)."""


def dependencies(after: Sequence[str], registry: Registry, be) -> tuple:
    """`--after` as the plan's dependencies, on a backend that declares them."""
    if not after:
        return ()
    if Capability.DEPENDENCIES not in be.capabilities:
        raise HpclaunchError(f"--after: the {be.name} backend runs no dependencies \u2014 submit with --backend "
                             f"{' or '.join(names(Capability.DEPENDENCIES))}")
    return tuple(parse_after(a, registry, be.name) for a in after)


def parse_after(spec: str, registry: Registry, backend: str) -> tuple[str, str]:
    """`JOB[:afterok|afterany|afternotok]` -> (kind, job id): a dependency on a job of `backend` (JOB: an
    id or a name)."""
    ref, _, kind = spec.partition(":")
    kind = kind or "afterok"
    if kind not in DEPENDENCY_KINDS:
        raise HpclaunchError(f"--after {spec}: unknown dependency '{kind}' \u2014 use one of {', '.join(DEPENDENCY_KINDS)}")
    if ref.isdigit():
        return kind, ref
    found = [r for r in registry.find(ref) if r.backend == backend]
    if not found:
        raise HpclaunchError(f"--after {spec}: no {backend} job '{ref}' in the registry \u2014 give a job id or a name "
                             "from `hpclaunch list`")
    return kind, found[0].job_id


def _runs_root_problem(root: str) -> Optional[str]:
    """Why run directories cannot be made under ``root``, or None. Creates nothing: a submission
    that Slurm then refuses must leave no folder behind."""
    blocker = file_in_the_way(root)
    if blocker:
        return f"{blocker} is a file, not a folder"
    path = os.path.abspath(root)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)  # the folder the missing ones would be made in
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path}: Permission denied"
    return None


def ensure_runs_root(root: str, resolved: Resolved) -> None:
    """Check, before anything is queued or numbered, that the folder run directories go in can be
    made: if not, the user's one-line error, naming where the setting came from."""
    why = _runs_root_problem(root)
    if why is None:
        return
    if resolved.job.runs_root is not None:
        value = resolved.job.runs_root
        source = resolved.origins.get("runs_root", display_path(resolved.job_path))
    else:
        value = resolved.profile.profile.runs_root
        source = resolved.profile.origins.get("runs_root", display_path(resolved.profile.path))
    raise InvalidInput([Problem(source, "runs_root", f"cannot create {root}: {why}", value,
                                "set runs_root to a folder you can write, e.g. runs_root: runs")])


def make_run_dir(run_dir: str, document: dict, script: str, tasks: int = 0) -> None:
    """The run directory with the script and the resolved job (``document``, as job.yaml)."""
    try:
        _make_run_dir(run_dir, document, script, tasks)
    except OSError as e:
        raise HpclaunchError(f"{run_dir}: cannot write the run directory: {e.strerror or e} \u2014 "
                             "check the space and permissions where runs_root points") from None


def _claimed(run_dir: str) -> bool:
    """An empty folder the backend made for this job (the local backend claims its run directory)."""
    try:
        return os.path.isdir(run_dir) and not os.path.islink(run_dir) and not os.listdir(run_dir)
    except OSError:
        return False


def _make_run_dir(run_dir: str, document: dict, script: str, tasks: int = 0) -> None:
    make_private_dirs(os.path.dirname(run_dir))
    if os.path.lexists(run_dir) and not _claimed(run_dir):
        # Job ids restart when a cluster's state is reset: keep the older run, never overwrite it.
        n = 1
        while os.path.exists(f"{run_dir}.prev{n}"):
            n += 1
        os.rename(run_dir, f"{run_dir}.prev{n}")
    created = True
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    try:
        subdirs = ["logs", "monitor", "metrics", "checkpoints", ".hpclaunch"]
        for sub in subdirs:
            os.makedirs(os.path.join(run_dir, sub), mode=0o700, exist_ok=True)
        for t in range(tasks):  # array tasks: Slurm opens task<N>/logs/slurm.out itself
            for sub in subdirs:
                os.makedirs(os.path.join(run_dir, f"task{t}", sub), mode=0o700, exist_ok=True)
        write_atomic(os.path.join(run_dir, "script.sbatch"), script, mode=0o600)
        write_atomic(os.path.join(run_dir, "job.yaml"), dump_yaml(document), mode=0o600)
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def sources_of(resolved: Resolved) -> SourceMap:
    """Where each value of the job came from, for messages about it."""
    return SourceMap(display_path(resolved.job_path), resolved.origins)


def _registry_meta(resolved: Resolved, document: dict, plan: Plan, cwd: str) -> dict:
    document = dict(document, hpclaunch=dict(document["hpclaunch"], submit_dir=cwd))
    return dict(job_file=os.path.abspath(resolved.job_path), job_sha256=resolved.source_hash,
                profile=plan.profile_name, launcher=plan.launcher, nodes=plan.nodes,
                partition=plan.placement.partition, resolved=document)


def submit(job: str | Resolved, overrides: Sequence[str] = (), *, backend: Optional[str] = None,
           after: Sequence[str] = (), preflight: bool = True, cwd: Optional[str] = None,
           registry: Optional[Registry] = None, study_dir: Optional[str] = None, tasks: Optional[int] = None) -> Job:
    """Submit a job file (or a resolved job); returns a Job handle.

    The same steps for every backend: check, queue held, make the run directory and the registry
    rows, release. Anything failing before the release abandons what was queued. A study (a sweep
    with a metric) is submitted by runs/tuning.py, which makes its folder first: `study_dir`, and
    `tasks`, the trials it still owes."""
    be = job_backend(backend)
    be.prefetch(preflight)  # a cluster answers while the job loads and renders
    resolved = job if isinstance(job, Resolved) else resolve_job(job, overrides)
    cwd = os.path.abspath(cwd or os.getcwd())
    reg = registry or Registry()
    reg.check()  # a damaged registry is refused before anything is queued or a run directory made
    sweep = resolved.job.sweep
    if sweep is not None and sweep.study and study_dir is None:
        raise IsStudy(f"{display_path(resolved.job_path)}: the sweep has a metric, so it is a study — "
                      "run it with `hpclaunch tune`, which keeps the study its trials ask")
    plan = build_plan(resolved, study_dir=study_dir, tasks=tasks)
    if after:
        plan = replace(plan, after=dependencies(after, reg, be))
    if plan.checkpoint_interval == "auto":   # the partition's failure rate: the cadence's start (docs/recovery.md)
        plan = replace(plan, failure_rate=failure_rate(reg, plan.placement.partition))
    request = be.prepare(plan)
    alert_conf = alerts.settings({"alerts": to_plain(resolved.job.alerts)})
    alerts.check_secrets(alert_conf)  # a secret that cannot be had: the user's one line, nothing queued
    root = plan.runs_root if os.path.isabs(plan.runs_root) else os.path.join(cwd, plan.runs_root)
    sources = sources_of(resolved)
    be.check(request, sources)
    if preflight:
        be.preflight(request, sources)
    ensure_runs_root(root, resolved)
    queued = be.queue(request, cwd=cwd, new_id=reg.next_local_id)
    ids = [job_id for job_id, _ in queued]
    try:
        run_dir = os.path.join(root, f"{plan.slug}-{ids[0]}")
        document = resolved.to_document()  # once: job.yaml and every registry row (~3 ms each)
        make_run_dir(run_dir, document, request.script)
        alerts.write_config(run_dir, alert_conf)
        meta = _registry_meta(resolved, document, plan, cwd)
        first = None
        for job_id, count in queued:
            rec = reg.add(backend=be.name, cluster=be.cluster_name(), job_id=job_id, name=plan.job_name,
                          run_dir=run_dir, array_size=count or None, parent_key=first.key if first else None,
                          **meta)
            first = first or rec
    except BaseException:
        be.abandon(ids)
        raise
    released = []
    try:
        for job_id, count in queued:
            be.release(JobRef(job_id, run_dir, count), request, cwd=cwd)
            released.append(job_id)
    except BaseException:
        be.abandon(ids)
        reg.update_state(first.key, "CANCELLED", detail={"error": "the job could not be started; it was cancelled"})
        raise
    reg.event(first.key, "released", {"arrays": ids, "tasks": plan.array_size} if plan.array_size else None)
    return Job(first, reg)


def test_only(job: str | Resolved, overrides: Sequence[str] = (), *, after: Sequence[str] = (),
              backend: Optional[str] = "slurm") -> str:
    """Preflight plus the backend's own verdict (Slurm: `sbatch --test-only`, when and where it
    would start). Queues and records nothing."""
    be = job_backend(backend)
    be.prefetch(True)
    resolved = job if isinstance(job, Resolved) else resolve_job(job, overrides)
    plan = build_plan(resolved)
    if after:
        plan = replace(plan, after=dependencies(after, Registry(), be))
    request = be.prepare(plan)
    be.check(request, sources_of(resolved))
    return be.preflight(request, sources_of(resolved), test_only=True) or ""
