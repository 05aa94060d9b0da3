"""Rules across fields and against the profile: node shape, site limits, launcher needs.

Every rule tolerates values that already failed their type check (None), so one
run reports every problem.
"""
from __future__ import annotations

from hpclaunch.common.errors import Problem
from dataclasses import fields
from hpclaunch.launchers import modes
from hpclaunch.spec.alerts import alerts_problems
from hpclaunch.spec.job import _EXTRA, DEFAULT_GRACE_S, SIGNAL_EARLY_S, Job, env_entry_problem, signal_grace
from hpclaunch.spec.profile import Profile
from hpclaunch.spec.study import study_problems
from hpclaunch.spec.sweep import check, count, train_samples
from hpclaunch.spec.train import Train, train_problems
from hpclaunch.spec.typedload import SourceMap
from hpclaunch.spec.units import format_time, parse_mem_mib, parse_time_seconds

# sbatch options hpclaunch sets itself: passing them through `slurm.extra` would contradict the job.
_OWNED = {
    "--nodes": "resources.nodes", "--ntasks-per-node": "resources.tasks_per_node",
    "--ntasks": "resources.tasks_per_node", "--cpus-per-task": "resources.cpus_per_task",
    "--mem": "resources.mem", "--time": "resources.time", "--partition": "slurm.partition",
    "--account": "slurm.account", "--qos": "slurm.qos", "--job-name": "name",
    "--output": "runs_root", "--error": "runs_root",
    "--signal": "requeue.signal, requeue.grace and requeue.signal_ranks (docs/requeue.md)",
    "--gpus-per-node": "resources.gpus_per_node", "--gres": "resources.gpus_per_node",
    "--exclusive": "slurm.exclusive", "--constraint": "slurm.constraint", "--requeue": "requeue.max_attempts",
    "--no-requeue": "requeue.max_attempts", "--open-mode": "(hpclaunch appends logs across attempts)",
    "--chdir": "workdir", "--wrap": "command", "--array": "sweep", "--no-kill": "resources.spare_nodes (docs/recovery.md)",
}


def job_problems(job: Job | None, load_problems: list[Problem], profile: Profile,
                 sources: SourceMap) -> list[Problem]:
    """The loader's problems, then the rules' on what loaded: a rule's problem at (or under) a
    path the loader already reported is left out, and each line is reported once."""
    problems = list(load_problems)
    if job is not None:
        failed = [p.path for p in load_problems]
        problems += [p for p in validate_job(job, profile, sources)
                     if not any(_within(p.path, f) for f in failed)]
    unique: dict[str, Problem] = {}
    for p in problems:
        unique.setdefault(str(p), p)
    return list(unique.values())


def _within(path: str, outer: str) -> bool:
    return path == outer or path.startswith((outer + ".", outer + "["))


def validate_job(job: Job, profile: Profile, sources: SourceMap) -> list[Problem]:
    out: list[Problem] = []

    def bad(path: str, message: str, value: object, fix: str) -> None:
        out.append(Problem(sources.of(path), path, message, value, fix))

    r, node, limits = job.resources, profile.node, profile.limits
    tpn, cpt, gpn = r.tasks_per_node, r.cpus_per_task, r.gpus_per_node
    if tpn is not None and cpt is not None and tpn * cpt > node.cpus:
        bad("resources.tasks_per_node",
            f"{tpn} ranks x {cpt} CPUs per rank = {tpn * cpt} CPUs per node, but a node of profile "
            f"'{profile.name}' has {node.cpus}", tpn,
            f"use tasks_per_node x cpus_per_task <= {node.cpus}")
    if gpn is not None and gpn > node.gpus:
        bad("resources.gpus_per_node", f"a node of profile '{profile.name}' has {node.gpus} GPUs", gpn,
            f"use at most {node.gpus}" if node.gpus else "use 0 (this profile has no GPUs) or pick a GPU profile")
    if r.mem is not None and node.mem is not None:
        try:
            if parse_mem_mib(r.mem) > parse_mem_mib(node.mem):
                bad("resources.mem", f"a node of profile '{profile.name}' has {node.mem}", r.mem,
                    f"ask for at most {node.mem}")
        except ValueError:
            pass
    if limits.max_nodes is not None and r.nodes is not None and r.nodes > limits.max_nodes:
        bad("resources.nodes", f"profile '{profile.name}' allows at most {limits.max_nodes} nodes", r.nodes,
            f"use at most {limits.max_nodes}")
    seconds = _seconds(r.time)
    if limits.max_time is not None and seconds is not None:
        cap = _seconds(limits.max_time)
        if cap is not None and seconds > cap:
            bad("resources.time", f"profile '{profile.name}' allows at most {format_time(cap)}", r.time,
                f"use at most \"{format_time(cap)}\"")
    part = job.slurm.partition
    if limits.partitions and part is not None and part not in limits.partitions:
        bad("slurm.partition", f"profile '{profile.name}' allows partitions {', '.join(limits.partitions)}",
            part, "pick one of those")

    _launcher_rules(job, profile, bad)
    _requeue_rules(job, seconds, bad)
    _recovery_rules(job, profile, bad)
    _train_rules(job.train, job.resources, profile, bad)
    _env_rules(job, bad)
    if job.sweep is not None and job.sweep.parameters is not None:
        check(job.sweep, job.command or [], job.env or {}, bad)
        study_problems(job, bad)
        _swept_train_rules(job, profile, bad, {p.path for p in out})
        n = count(job.sweep)
        if n > 100000 and not job.sweep.study:
            bad("sweep.parameters", f"the sweep has {n} points", n, "use at most 100000 (or random search)")
    for i, opt in enumerate(job.slurm.extra or []):
        name = opt.split("=", 1)[0]
        if not _EXTRA.fullmatch(opt):
            bad(f"slurm.extra[{i}]", "is not one sbatch long option of the form --name or --name=value", opt,
                "write e.g. \"--constraint=a100\" (no spaces, no shell characters)")
        elif name in _OWNED:
            bad(f"slurm.extra[{i}]", f"{name} is set by hpclaunch", opt, f"set {_OWNED[name]} instead")
    for path, message, value, fix in alerts_problems(job.alerts):
        out.append(Problem(sources.of(path), path, message, value, fix, has_value=value is not None))
    return out


def _seconds(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_time_seconds(text)
    except ValueError:
        return None


def _launcher_rules(job: Job, profile: Profile, bad) -> None:
    """Every launcher's rules, then the job's launcher's own (launchers/modes/<launcher>.py: problems)."""
    r, launcher = job.resources, job.launcher
    tpn, gpn = r.tasks_per_node, r.gpus_per_node
    if tpn == 0:
        bad("resources.tasks_per_node", f"{launcher} needs at least one rank per node", tpn,
            "use tasks_per_node >= 1")
    if tpn and gpn and tpn > gpn:
        bad("resources.tasks_per_node",
            f"{tpn} ranks per node but {gpn} GPUs per node: ranks would share GPUs or hang at init", tpn,
            f"use tasks_per_node = gpus_per_node ({gpn})")
    if job.container is not None and profile.container.runtime is None:
        bad("container", f"profile '{profile.name}' names no container runtime", job.container.image,
            "set container.runtime (pyxis, apptainer or podman) in the profile, or drop container:")
    if launcher is not None and modes.known(launcher):
        for problem in modes.get(launcher).problems(job, profile):
            bad(*problem)


def _requeue_rules(job: Job, seconds: int | None, bad) -> None:
    rq = job.requeue
    signalled = (rq.max_attempts and rq.max_attempts > 1) or rq.by == "program" or rq.signal_ranks
    if not signalled or seconds is None:
        return
    if rq.grace is not None and rq.grace >= seconds:
        bad("requeue.grace", f"the signal would come before the job starts: the time limit is {seconds} s",
            rq.grace, "use a grace period shorter than resources.time (Slurm's timer has ~30 s resolution)")
    elif signal_grace(rq.grace, seconds) is None and (rq.by == "program" or rq.signal_ranks):
        # unset, the grace leaves such a short job unsignalled; a program waiting for the signal must hear of it
        asks = "requeue.by is program" if rq.by == "program" else "requeue.signal_ranks is true"
        bad("requeue.grace", f"{asks}, but with the default grace of {DEFAULT_GRACE_S} s a time limit of "
            f"{seconds} s gets no signal (Slurm may send it up to {SIGNAL_EARLY_S} s early)", DEFAULT_GRACE_S,
            f"set requeue.grace below the time limit (e.g. grace: {max(1, seconds // 2)}), or a longer resources.time")


def _recovery_rules(job: Job, profile: Profile, bad) -> None:
    """Spare nodes and shrinking need a launcher whose step can run again on other nodes; the hang
    bound's floor is below its ceiling (docs/recovery.md)."""
    r, rec, launcher = job.resources, job.recovery, job.launcher
    can = modes.get(launcher).recovery if launcher is not None and modes.known(launcher) else ("spares", "shrink")
    spares = r.spare_nodes or 0
    if spares and "spares" not in can:
        bad("resources.spare_nodes", f"launcher {launcher} cannot run its step again on a spare node", spares,
            "use 0 (a dead node's job is requeued without it)" + (
                "; Ray retries a lost worker's tasks itself" if launcher == "ray" else ""))
    limits = profile.limits
    if spares and r.nodes is not None and limits.max_nodes is not None and r.nodes + spares > limits.max_nodes:
        bad("resources.spare_nodes", f"{r.nodes} node(s) and {spares} spare(s): profile '{profile.name}' allows "
            f"at most {limits.max_nodes} node(s) in all", spares, f"use at most {max(0, limits.max_nodes - r.nodes)}")
    if rec is None:
        return
    if rec.shrink and "shrink" not in can:
        bad("recovery.shrink", f"launcher {launcher} cannot go on with fewer nodes", rec.shrink,
            "use false (the job is requeued without the dead node), or launcher torchrun")
    if rec.min_nodes is not None and r.nodes is not None and rec.min_nodes > r.nodes:
        bad("recovery.min_nodes", f"is more than the job's {r.nodes} node(s)", rec.min_nodes,
            f"use at most {r.nodes}")
    hang = rec.hang
    if hang is not None and hang.floor is not None and hang.ceiling is not None and hang.floor > hang.ceiling:
        bad("recovery.hang.floor", f"is above the ceiling ({hang.ceiling:g} s)", hang.floor,
            "use a floor at or below recovery.hang.ceiling")


def _train_rules(t, r, profile: Profile, bad) -> None:
    # the rank runs train_problems too, on the same settings in the same world (spec/train.py)
    world = r.nodes * r.tasks_per_node if r.nodes is not None and r.tasks_per_node is not None else None
    for problem in train_problems(t, world, profile.limits, profile.training.lr_scaling, profile.name):
        bad(*problem)


def _swept_train_rules(job: Job, profile: Profile, bad, reported: set) -> None:
    """The profile's training limits on each swept train.KEY value, as if train: held it: the rank
    reads the point as train: settings and runs the same train_problems on them."""
    base: set = set()  # what train: alone breaks is reported at train.*, not again per parameter
    _train_rules(job.train, job.resources, profile, lambda p, m, v, f: base.add((p, m)))
    for name, spec in job.sweep.parameters.items():
        path = f"sweep.parameters.{name}"
        if not name.startswith("train.") or path in reported:
            continue
        key = name.split(".", 1)[1]
        # global_batch's rule is about batch_per_gpu too; the other rules name their own key
        paths = {f"train.{key}"} | ({"train.global_batch"} if key == "batch_per_gpu" else set())
        found: list = []

        def at_param(rule_path: str, message: str, value: object, fix: str) -> None:
            if rule_path in paths and (rule_path, message) not in base and not found:  # one line per parameter
                found.append(value)
                bad(path, message, value, fix)

        for value in train_samples(spec):
            train = Train(**{f.name: getattr(job.train, f.name) for f in fields(Train)})
            setattr(train, key, value)
            _train_rules(train, job.resources, profile, at_param)


def _env_rules(job: Job, bad) -> None:
    for name, value in (job.env or {}).items():
        found = env_entry_problem(name, [value])
        if found:
            bad(f"env.{name}", *found)
