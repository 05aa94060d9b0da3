"""Python callables on the cluster through submitit, with an hpclaunch profile's settings.

submitit does the work (pickling the call, sbatch, srun, results, checkpoint/requeue); this module
only turns a profile + keyword overrides into a job plan (hpclaunch.launchers.backends.submitit
makes submitit's parameters from it, as the renderer makes a script), validated by hpclaunch's own
loader (same one-line errors as a job file), and records every submission in hpclaunch's registry
so `hpclaunch status` / `hpclaunch list` see it next to batch jobs.

    from hpclaunch import submit_function
    job = submit_function(train, cfg, profile="a100-hpc", nodes=2, time="02:00:00")
    job.result()

A callable runs once (1 node x 1 task) unless asked otherwise: the profile's training shape is for
training jobs, not for a function. Overrides are job-file keys: short names (`nodes`, `tasks_per_node`, `gpus_per_node`,
`cpus_per_task`, `mem`, `time`, `partition`, `account`, `qos`, `constraint`, `exclusive`,
`max_attempts`, `requeue_signal`, `requeue_grace`, `env`, `name`), nested sections
(`resources={"nodes": 2}`, `slurm={...}`, `requeue={...}`) or CLI-style strings
(`overrides=["resources.nodes=2"]`). Keywords with submitit's own `slurm_` / `local_` prefix go to
`AutoExecutor.update_parameters` unchanged (submitit checks them).

Each executor gets a fresh folder by default, `<runs_root>/submitit-<timestamp>-<pid>-<n>/%j`:
job ids restart with a fresh cluster, and a reused `%j` folder hands back an older job's result.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.slurmcli import clean_env
from hpclaunch.launchers.backends.submitit import SubmititBackend, executor_cluster, parameters, recorded
from hpclaunch.launchers.plan import Plan, build_plan
from hpclaunch.runs.jobs import Job
from hpclaunch.runs.registry import Registry
from hpclaunch.spec.job import Job as JobSpec
from hpclaunch.spec.loading import Resolved, resolve_data
from hpclaunch.spec.merge import set_path
from hpclaunch.spec.overrides import UNKNOWN, field_type, parse_override, suggest
from hpclaunch.spec.typedload import SourceMap, to_plain

DEFAULT_PROFILE = "testcluster"

#: keyword -> job-file key
SHORT_KEYS = {
    "nodes": "resources.nodes",
    "tasks_per_node": "resources.tasks_per_node",
    "gpus_per_node": "resources.gpus_per_node",
    "cpus_per_task": "resources.cpus_per_task",
    "mem": "resources.mem",
    "time": "resources.time",
    "partition": "slurm.partition",
    "account": "slurm.account",
    "qos": "slurm.qos",
    "constraint": "slurm.constraint",
    "exclusive": "slurm.exclusive",
    "extra": "slurm.extra",
    "max_attempts": "requeue.max_attempts",
    "requeue_signal": "requeue.signal",
    "requeue_grace": "requeue.grace",
    "env": "env",
    "name": "name",
    "workdir": "workdir",
}
#: whole sections given as mappings
SECTIONS = ("resources", "slurm", "requeue")
_PASS_THROUGH = ("slurm_", "local_")
_COUNTER = itertools.count()


@dataclass
class Settings:
    """A profile + overrides, validated: the resolved job, its plan, and submitit's parameters."""

    resolved: Resolved
    plan: Plan
    cluster: str                       # "slurm" or "local"
    parameters: dict                   # for AutoExecutor.update_parameters
    init: dict                         # for AutoExecutor(...) (slurm_max_num_timeout)

    @property
    def spec(self) -> JobSpec:
        return self.resolved.job

    @property
    def profile(self):
        return self.resolved.profile

    def document(self) -> dict:
        doc = to_plain(self.spec)
        doc.pop("command", None)
        doc["launcher"] = "submitit"
        doc["profile"] = {"ref": self.profile.profile.name, "path": self.profile.path}
        doc["submitit"] = {"cluster": self.cluster, **{k: v for k, v in self.parameters.items()}}
        return doc


def resolve(profile: str = DEFAULT_PROFILE, overrides: Optional[Mapping[str, Any]] = None,
            strings: Sequence[str] = (), *, caller: str = "executor", cwd: Optional[str] = None,
            cluster: Optional[str] = None) -> Settings:
    """Profile defaults < one node x one task < keyword overrides < `strings` ("key=value", as
    `-o`); validated by the job loader, translated by the plan builder."""
    cwd = os.path.abspath(cwd or os.getcwd())
    overrides = dict(overrides or {})
    passthrough = {k: overrides.pop(k) for k in list(overrides) if k.startswith(_PASS_THROUGH)}
    layer: dict = {"name": "submitit", "command": ["python"], "launcher": "srun", "profile": profile,
                   "resources": {"nodes": 1, "tasks_per_node": 1}}
    origins_of: dict[str, str] = {"profile": f"{caller}(profile=...)"}
    for kw, value in overrides.items():
        if kw in SECTIONS:
            if not isinstance(value, Mapping):
                raise HpclaunchError(f"{caller}({kw}=...): expected a mapping of {kw} keys, got {value!r} "
                                     f"\u2014 e.g. {kw}={{...}} or the short keywords ({', '.join(SHORT_KEYS)})")
            for sub, v in value.items():
                key = f"{kw}.{sub}"
                _check_key(key, caller, kw)
                set_path(layer, key, v)
                origins_of[key] = f"{caller}({kw}=...)"
            continue
        key = SHORT_KEYS.get(kw)
        if key is None:
            close = difflib.get_close_matches(kw, list(SHORT_KEYS) + list(SECTIONS), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise HpclaunchError(f"{caller}({kw}=...): unknown setting \u2014 {hint}use one of "
                                 f"{', '.join(list(SHORT_KEYS) + list(SECTIONS))}, or a submitit "
                                 "parameter prefixed slurm_")
        set_path(layer, key, value)
        origins_of[key] = f"{caller}({kw}=...)"
    for text in strings:
        key, value = parse_override(text)  # unknown keys: the CLI's one-line error
        set_path(layer, key, value)
        origins_of[key] = f"{caller}(overrides: {key})"
    resolved = resolve_data(layer, f"{caller}()", cwd, cwd, origins_of, job_path=os.path.join(cwd, f"{caller}()"))
    plan = build_plan(resolved)
    which = executor_cluster(cluster)
    # Was the signal chosen (by the profile or the caller), or is it the default?
    defaults = resolved.profile.profile.defaults.get("requeue")
    signal_chosen = "signal" in layer.get("requeue", {}) or (isinstance(defaults, dict) and "signal" in defaults)
    params, init = parameters(plan, which, SourceMap(f"{caller}()", resolved.origins), signal_chosen)
    params.update(passthrough)
    return Settings(resolved, plan, which, params, init)


def _check_key(key: str, caller: str, kw: str) -> None:
    if field_type(key) is UNKNOWN:
        raise HpclaunchError(f"{caller}({kw}=...): {key}: unknown key \u2014 {suggest(key)}")


def fresh_folder(runs_root: str = "runs", cwd: Optional[str] = None) -> str:
    """`<runs_root>/submitit-<UTC timestamp>-<pid>-<n>/%j`, absolute: never shared between calls."""
    root = runs_root if os.path.isabs(runs_root) else os.path.join(os.path.abspath(cwd or os.getcwd()), runs_root)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"{time.time() % 1:.6f}"[1:]
    return os.path.join(root, f"submitit-{stamp}-{os.getpid()}-{next(_COUNTER)}", "%j")


def executor(profile: str = DEFAULT_PROFILE, folder: Optional[str] = None, *, overrides: Sequence[str] = (),
             cluster: Optional[str] = None, cwd: Optional[str] = None, **settings: Any):
    """A submitit.AutoExecutor set up from `profile` (defaults, limits, site dialect) and the overrides.

    `cluster` is "slurm" or "local" (default: Slurm when sbatch and a slurm.conf are here).
    Raises HpclaunchError / InvalidInput (one line per problem) before anything is queued.
    """
    ex, _ = _executor(profile, folder, overrides, cluster, cwd, settings, "executor")
    return ex


def _executor(profile, folder, overrides, cluster, cwd, settings, caller):
    import submitit  # heavy (~0.2 s): only when a function is submitted
    cfg = resolve(profile, settings, overrides, caller=caller, cwd=cwd, cluster=cluster)
    runs_root = cfg.plan.runs_root
    folder = folder or fresh_folder(runs_root, cwd)
    ex = submitit.AutoExecutor(folder=folder, cluster=cfg.cluster, **cfg.init)
    ex.update_parameters(**cfg.parameters)
    ex.hpclaunch_settings = cfg  # what it was made from, for the registry and for callers
    return ex, cfg


def submit_function(fn: Callable, *args: Any, profile: str = DEFAULT_PROFILE, folder: Optional[str] = None,
                    overrides: Sequence[str] = (), cluster: Optional[str] = None, registry=None,
                    cwd: Optional[str] = None, **settings: Any):
    """Run fn(*args) through submitit with the profile's settings; returns the submitit Job.

    Keyword arguments are settings (see the module docstring), not arguments of fn: bind those
    with functools.partial. The job is recorded in hpclaunch's registry (backend "submitit", the
    job's submitit folder as its run directory); `job.hpclaunch` is the hpclaunch handle.
    """
    settings.setdefault("name", getattr(fn, "__name__", "submitit"))
    ex, cfg = _executor(profile, folder, overrides, cluster, cwd, settings, "submit_function")
    with _clean_submit_env():
        job = ex.submit(fn, *args)
    _record(job, cfg, registry, str(job.paths.folder), array_size=None)
    return job


def map_function(fn: Callable, *iterables: Iterable, profile: str = DEFAULT_PROFILE, folder: Optional[str] = None,
                 overrides: Sequence[str] = (), cluster: Optional[str] = None, registry=None,
                 cwd: Optional[str] = None, parallelism: Optional[int] = None, **settings: Any):
    """fn over the iterables as one Slurm job array (submitit's map_array), recorded as one registry row."""
    settings.setdefault("name", getattr(fn, "__name__", "submitit"))
    if parallelism is not None:
        settings["slurm_array_parallelism"] = parallelism
    ex, cfg = _executor(profile, folder, overrides, cluster, cwd, settings, "map_function")
    with _clean_submit_env():
        jobs = ex.map_array(fn, *iterables)
    if jobs:
        base = str(jobs[0].job_id).split("_")[0]
        _record(jobs[0], cfg, registry, str(jobs[0].paths.folder.parent), array_size=len(jobs), job_id=base)
    return jobs


def _record(job, cfg: Settings, registry, run_dir: str, array_size: Optional[int], job_id: Optional[str] = None):
    if not recorded(cfg.cluster):
        return None  # submitit's LocalExecutor: its runs are submitit's own, nothing to record
    reg = registry or Registry()
    rec = reg.add(backend=SubmititBackend.name, cluster=_cluster_name(), job_id=job_id or str(job.job_id),
                  name=cfg.spec.name, run_dir=run_dir, profile=cfg.profile.profile.name,
                  partition=cfg.spec.slurm.partition, launcher="submitit", nodes=cfg.spec.resources.nodes,
                  array_size=array_size, resolved=cfg.document())
    job.hpclaunch = Job(rec, reg)
    return rec


def _cluster_name() -> str:
    try:
        return SubmititBackend().cluster_name()   # the Slurm cluster's name, as batch jobs record it
    except HpclaunchError:
        return "slurm"


@contextlib.contextmanager
def _clean_submit_env():
    """sbatch inherits this process's environment: drop an enclosing job's SLURM_*/SBATCH_* settings
    (submitit#1782), as hpclaunch's own submissions do, for the duration of the submission."""
    saved = dict(os.environ)
    cleaned = clean_env()
    removed = [k for k in saved if k not in cleaned]
    try:
        for k in removed:
            del os.environ[k]
        yield
    finally:
        for k in removed:
            os.environ[k] = saved[k]
