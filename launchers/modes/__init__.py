"""The launchers, one module each, and their registry: how ranks start.

A launcher module (launchers/modes/<name>.py, or another package's module registered under the
entry point group `hpclaunch.launchers`, `NAME = "package.module"`) says everything hpclaunch knows
of one way to start ranks:

    NAME        the job file's `launcher:` value
    PER_NODE    True: one scheduler task per node starts the node's ranks (torchrun, ray);
                False (default): one scheduler task per rank
    RANK_ENV    where its ranks read their place: one of hpclaunch.common.rankenv.KINDS (exported to
                the ranks as HPCLAUNCH_RANK_ENV; train_entry/distenv.py reads that kind first)
    STARTER     (command, note) or (command, note, tasks_per_node): what `hpclaunch init --launcher
                NAME` writes
    RECIPES     optional {mode: (command, note, tasks_per_node or None)}: more `init --launcher`
                modes this launcher runs (srun: jax, lightning)
    settings(profile) -> dict     optional: the profile section it reads, as the templates' `r.launch`
    problems(job, profile)        optional: its own validation, (path, message, value, fix) each
    launch_text(plan) -> str      optional, for a launcher of another package: the launch section's
                bash lines (every value quoted); without it the section is templates/<NAME>.j2
    RECOVERY    optional, what in-allocation recovery may do with its step (docs/recovery.md):
                "spares" (its launch section runs again on other nodes: it places ranks only on
                hl_nodes and through hl_step), "shrink" (on fewer nodes). Default: neither

The registry feeds the job schema (spec/job.py: `launcher:` values), validation (spec/validate.py),
`init` (spec/starter.py) and its `--launcher` choices (cli/parser.py), the plan (launchers/plan.py:
the shape, the settings) and the script (backends/slurm_script.py). These modules sit at the spec
layer (tests/layers.py): they import nothing of hpclaunch but hpclaunch.common.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Dict, Optional, Tuple

from hpclaunch.common.rankenv import KINDS

BUILT_IN = ("torchrun", "horovod", "mpi", "srun", "ray", "tensorflow", "accelerate", "deepspeed")
ENTRY_POINTS = "hpclaunch.launchers"
RECOVERY_KINDS = ("spares", "shrink")


class Launcher:
    """A launcher module, its optional parts filled in (a plain class: a dataclass costs ~0.3 ms to
    create, on every render)."""

    __slots__ = ("name", "per_node", "rank_env", "template", "launch_text", "settings", "problems", "starters",
                 "recovery")

    def __init__(self, name: str, per_node: bool, rank_env: str, template: Optional[str],
                 launch_text: Optional[Callable[[Any], str]], settings: Callable[[Any], Dict[str, Any]],
                 problems: Callable[[Any, Any], Any], starters: Tuple[Tuple[str, str, str, Optional[int]], ...],
                 recovery: Tuple[str, ...] = ()):
        self.name = name
        self.per_node = per_node                # one scheduler task a node starts the node's ranks
        self.rank_env = rank_env                # one of hpclaunch.common.rankenv.KINDS
        self.template = template                # templates/<name>.j2, or None with launch_text
        self.launch_text = launch_text
        self.settings = settings
        self.problems = problems
        self.starters = starters                # (mode, command, note, tasks_per_node or None)
        self.recovery = recovery                # "spares", "shrink": what in-allocation recovery may do


_installed: Optional[dict] = None
_loaded: Dict[str, Launcher] = {}


def installed() -> dict:
    """{name: entry point} of the launchers other packages register (read once, only when asked)."""
    global _installed
    if _installed is None:
        from importlib import metadata
        try:
            found = metadata.entry_points(group=ENTRY_POINTS)
        except TypeError:  # Python 3.9: a dict of groups
            found = metadata.entry_points().get(ENTRY_POINTS, ())
        _installed = {ep.name: ep for ep in found if ep.name not in BUILT_IN}
    return _installed


def known(name: object) -> bool:
    """A launcher's name (a built-in one without reading the entry points)."""
    return isinstance(name, str) and (name in BUILT_IN or name in installed())


def names() -> Tuple[str, ...]:
    return BUILT_IN + tuple(sorted(installed()))


def get(name: str) -> Launcher:
    if name not in _loaded:
        if name in BUILT_IN:
            module = importlib.import_module(f"hpclaunch.launchers.modes.{name}")
        elif name in installed():
            module = installed()[name].load()
        else:
            raise KeyError(name)
        _loaded[name] = describe(module)
    return _loaded[name]


def _no_settings(profile: Any) -> Dict[str, Any]:
    return {}


def _no_problems(job: Any, profile: Any) -> Tuple:
    return ()


def describe(module: Any) -> Launcher:
    """A launcher module as a Launcher record; ValueError naming what is missing or wrong."""
    name = getattr(module, "NAME", None)
    where = getattr(module, "__name__", repr(module))
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a launcher module needs NAME")
    rank_env = getattr(module, "RANK_ENV", None)
    if rank_env not in KINDS:
        raise ValueError(f"{where}: RANK_ENV {rank_env!r} is not one of {', '.join(KINDS)}")
    command, note, *tasks = getattr(module, "STARTER", ("[python, train.py]", ""))
    starters = [(name, command, note, tasks[0] if tasks else None)]
    for mode, (cmd, text, tasks) in getattr(module, "RECIPES", {}).items():
        starters.append((mode, cmd, text, tasks))
    text = getattr(module, "launch_text", None)
    recovery = tuple(getattr(module, "RECOVERY", ()))
    if not set(recovery) <= set(RECOVERY_KINDS):
        raise ValueError(f"{where}: RECOVERY {recovery!r} holds more than {', '.join(RECOVERY_KINDS)}")
    return Launcher(name=name, per_node=bool(getattr(module, "PER_NODE", False)), rank_env=rank_env,
                    template=None if text else f"{name}.j2", launch_text=text,
                    settings=getattr(module, "settings", _no_settings),
                    problems=getattr(module, "problems", _no_problems), starters=tuple(starters),
                    recovery=recovery)


def starters() -> Dict[str, Tuple[str, str, str, Optional[int]]]:
    """{`init --launcher` mode: (launcher, command, note, tasks_per_node or None)}, every launcher's."""
    out = {}
    for name in names():
        for mode, command, note, tasks in get(name).starters:
            out[mode] = (name, command, note, tasks)
    return out
