"""Submitting a job: validate, render, make the run directory, queue it, record it.

Order matters so that nothing is lost or half-done: Slurm holds the job until its run
directory and registry row exist; any failure before release cancels the held job, and the
registry only ever holds jobs that were queued.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Optional, Sequence

from hpclaunch.common.atomic import write_atomic
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.runs.jobs import Job
from hpclaunch.spec.loading import Resolved, resolve_job
from hpclaunch.runs.registry import Registry
from hpclaunch.spec.yamlio import display_path, dump_yaml

DEPENDENCY_KINDS = ("afterok", "afterany", "afternotok", "after")


def default_backend_name() -> str:
    """Slurm where a cluster is configured here, else this machine."""
    if shutil.which("sbatch") and (os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf")):
        return "slurm"
    return "local"


def get_backend(name: Optional[str]):
    name = name or default_backend_name()
    if name == "local":
        from hpclaunch.launchers.backends.local import LocalBackend
        return LocalBackend()
    if name == "slurm":
        from hpclaunch.launchers import slurmcli
        from hpclaunch.launchers.backends.slurm import SlurmBackend
        if not slurmcli.available():
            raise HpclaunchError("--backend slurm: sbatch is not on PATH \u2014 run on a login node, "
                                 "or use --backend local")
        return SlurmBackend()
    raise HpclaunchError(f"--backend {name}: unknown backend \u2014 use slurm or local")


def parse_after(spec: str, registry: Registry) -> str:
    """`JOB[:afterok|afterany|afternotok]` -> an sbatch dependency (JOB may be an id or a name)."""
    ref, _, kind = spec.partition(":")
    kind = kind or "afterok"
    if kind not in DEPENDENCY_KINDS:
        raise HpclaunchError(f"--after {spec}: unknown dependency '{kind}' \u2014 use one of {', '.join(DEPENDENCY_KINDS)}")
    if ref.isdigit():
        return f"{kind}:{ref}"
    found = [r for r in registry.find(ref) if r.backend == "slurm"]
    if not found:
        raise HpclaunchError(f"--after {spec}: no Slurm job '{ref}' in the registry \u2014 give a job id or a name "
                             "from `hpclaunch list`")
    return f"{kind}:{found[0].job_id}"


def _runs_root_problem(root: str) -> Optional[str]:
    """Why run directories cannot be made under ``root``, or None. Creates nothing: a submission
    that Slurm then refuses must leave no folder behind."""
    from hpclaunch.common.atomic import file_in_the_way
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
    from hpclaunch.common.errors import InvalidInput, Problem
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


def make_run_dir(run_dir: str, resolved: Resolved, script: str, tasks: int = 0) -> None:
    try:
        _make_run_dir(run_dir, resolved, script, tasks)
    except OSError as e:
        raise HpclaunchError(f"{run_dir}: cannot write the run directory: {e.strerror or e} \u2014 "
                             "check the space and permissions where runs_root points") from None


def _make_private_dirs(path: str) -> None:
    """os.makedirs, but each folder it creates is 0700 (makedirs' mode covers the last one only).
    Folders that exist are left as their owner made them."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another submitter made it first
            pass


def _make_run_dir(run_dir: str, resolved: Resolved, script: str, tasks: int = 0) -> None:
    _make_private_dirs(os.path.dirname(run_dir))
    if os.path.exists(run_dir):
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
        write_atomic(os.path.join(run_dir, "job.yaml"), dump_yaml(resolved.to_document()), mode=0o600)
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def submit(job: str | Resolved, overrides: Sequence[str] = (), *, backend: Optional[str] = None,
           after: Sequence[str] = (), preflight: bool = True, cwd: Optional[str] = None,
           registry: Optional[Registry] = None) -> Job:
    """Submit a job file (or a resolved job); returns a Job handle."""
    be = get_backend(backend)
    if be.name == "slurm":
        be.prefetch(preflight)  # the cluster answers while the job loads and renders
    from hpclaunch.launchers.render import render_script
    from hpclaunch.launchers.request import build_request
    resolved = job if isinstance(job, Resolved) else resolve_job(job, overrides)
    cwd = os.path.abspath(cwd or os.getcwd())
    reg = registry or Registry()
    request = build_request(resolved)
    script = render_script(request)
    root = request.runs_root if os.path.isabs(request.runs_root) else os.path.join(cwd, request.runs_root)
    document = resolved.to_document()
    document["hpclaunch"]["submit_dir"] = cwd
    meta = dict(job_file=os.path.abspath(resolved.job_path), job_sha256=resolved.source_hash,
                profile=resolved.profile.profile.name, launcher=resolved.job.launcher,
                nodes=resolved.job.resources.nodes, resolved=document)

    if be.name == "local":
        if after:
            raise HpclaunchError("--after: dependencies need Slurm \u2014 submit with --backend slurm")
        be.check(resolved)
        ensure_runs_root(root, resolved)
        job_id = reg.next_local_id()
        run_dir = os.path.join(root, f"{request.slug}-{job_id}")
        make_run_dir(run_dir, resolved, script)
        rec = reg.add(backend="local", cluster=be.cluster_name(), job_id=job_id, name=resolved.job.name,
                      run_dir=run_dir, partition="local", array_size=request.array_size or None, **meta)
        try:
            be.start(resolved, request, run_dir, job_id, rec.key, reg.path, cwd)
        except BaseException:
            reg.update_state(rec.key, "FAILED", detail={"error": "the local runner did not start"})
            raise
        return Job(rec, reg)

    args = [f"--dependency={','.join(parse_after(a, reg) for a in after)}"] if after else []
    if request.array_size:
        return _submit_array(be, reg, resolved, request, script, args, root, cwd, meta, preflight)
    if preflight:
        be.config()  # a controller that does not answer fails here, with Slurm's message
        be.preflight(resolved, request, script, args)
    ensure_runs_root(root, resolved)
    job_id = be.sbatch(script, args + ["--hold"], cwd)
    try:
        run_dir = os.path.join(root, f"{request.slug}-{job_id}")
        make_run_dir(run_dir, resolved, script)
        rec = reg.add(backend="slurm", cluster=be.cluster_name(), job_id=job_id, name=resolved.job.name,
                      run_dir=run_dir, partition=resolved.job.slurm.partition, **meta)
    except BaseException:
        _cancel_quietly(be, job_id)
        raise
    try:
        be.release(job_id)
    except BaseException:
        _cancel_quietly(be, job_id)
        reg.update_state(rec.key, "CANCELLED", detail={"error": "scontrol release failed; the job was cancelled"})
        raise
    reg.event(rec.key, "released")
    return Job(rec, reg)


def test_only(job: str | Resolved, overrides: Sequence[str] = (), *, after: Sequence[str] = ()) -> str:
    """Preflight plus `sbatch --test-only`: would Slurm take this job, and when would it start?
    Queues and records nothing."""
    be = get_backend("slurm")
    be.prefetch(True)
    from hpclaunch.launchers.render import render_script
    from hpclaunch.launchers.request import _array_spec, build_request
    resolved = job if isinstance(job, Resolved) else resolve_job(job, overrides)
    request = build_request(resolved)
    args = [f"--dependency={','.join(parse_after(a, Registry()) for a in after)}"] if after else []
    if request.array_size:
        args.append(f"--array={_array_spec(min(request.array_size, be.max_array_size()), request.parallelism)}")
    return be.preflight(resolved, request, render_script(request), args, test_only=True) or ""


def _submit_array(be, reg: Registry, resolved: Resolved, request, script: str, args: list[str], root: str,
                  cwd: str, meta: dict, preflight: bool) -> Job:
    """A sweep: one job array, split into several when it is larger than the cluster's MaxArraySize.
    Every chunk is held until all are queued and recorded, so a sweep is queued whole or not at all."""
    from hpclaunch.launchers.request import _array_spec
    if preflight:
        be.config()
    size = max(1, be.max_array_size())
    n, par = request.array_size, request.parallelism
    chunks = [(off, min(size, n - off)) for off in range(0, n, size)]
    if preflight:
        be.preflight(resolved, request, script, args + [f"--array={_array_spec(chunks[0][1], par)}"])
    ensure_runs_root(root, resolved)
    ids: list[str] = []
    user_dep = [a.split("=", 1)[1] for a in args if a.startswith("--dependency=")]
    other = [a for a in args if not a.startswith("--dependency=")]
    try:
        for k, (off, count) in enumerate(chunks):
            extra = [f"--array={_array_spec(count, par)}"]
            deps = list(user_dep)
            if k:
                sweep_dir = os.path.join(root, f"{request.slug}-{ids[0]}")
                extra += [f"--export=ALL,HPCLAUNCH_ARRAY_OFFSET={off},HPCLAUNCH_SWEEP_ID={ids[0]}",
                          f"--output={sweep_dir}/logs/slurm-%A_%a.out"]
                if par:  # %parallelism is per array: chained, the chunks never run more than it at once
                    deps.append(f"afterany:{ids[-1]}")
            if deps:
                extra.append(f"--dependency={','.join(deps)}")
            ids.append(be.sbatch(script, other + extra + ["--hold"], cwd))
        run_dir = os.path.join(root, f"{request.slug}-{ids[0]}")
        make_run_dir(run_dir, resolved, script)
        first = None
        for (off, count), job_id in zip(chunks, ids):
            rec = reg.add(backend="slurm", cluster=be.cluster_name(), job_id=job_id, name=resolved.job.name,
                          run_dir=run_dir, partition=resolved.job.slurm.partition, array_size=count,
                          parent_key=first.key if first else None, **meta)
            first = first or rec
    except BaseException:
        for job_id in ids:
            _cancel_quietly(be, job_id)
        raise
    for job_id in ids:
        be.release(job_id)
    reg.event(first.key, "released", {"arrays": ids, "tasks": n})
    return Job(first, reg)


def _cancel_quietly(be, job_id: str) -> None:
    try:
        be.cancel(job_id)
    except Exception:
        pass


def resubmit(record, registry: Registry, *, exclude: Sequence[str], attempts_so_far: int, reason: str):
    """Queue a job again from its own script, without the given nodes, continuing in its run
    directory (checkpoints, logs per attempt). Returns the new registry record."""
    be = get_backend("slurm")
    with open(os.path.join(record.run_dir, "script.sbatch"), encoding="utf-8") as f:
        script = f.read()
    args = [f"--exclude={','.join(exclude)}",
            f"--export=ALL,HPCLAUNCH_RESUME_DIR={record.run_dir},HPCLAUNCH_ATTEMPT_BASE={attempts_so_far}",
            f"--output={os.path.join(record.run_dir, 'logs', 'slurm.out')}", "--hold"]
    doc = json.loads(record.resolved or "{}")
    cwd = doc.get("hpclaunch", {}).get("submit_dir") or os.path.dirname(os.path.dirname(record.run_dir))
    job_id = be.sbatch(script, args, cwd)
    try:
        new = registry.add(backend="slurm", cluster=record.cluster, job_id=job_id, name=record.name,
                           run_dir=record.run_dir, job_file=record.job_file, job_sha256=record.job_sha256,
                           profile=record.profile, partition=record.partition, launcher=record.launcher,
                           nodes=record.nodes, resolved=json.loads(record.resolved) if record.resolved else None,
                           parent_key=None)
        registry.update_state(new.key, "PENDING", attempts=attempts_so_far + 1)
        registry.update_state(record.key, "NODE_FAIL" if record.state != "CANCELLED" else record.state,
                              detail={"resubmitted_as": job_id, "reason": reason})
        registry.event(new.key, "resubmitted", {"from": record.job_id, "exclude": list(exclude), "reason": reason})
    except BaseException:
        _cancel_quietly(be, job_id)
        raise
    be.release(job_id)
    return new
