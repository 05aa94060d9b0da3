"""Render targets: what `hpclaunch render --target NAME` turns a resolved job into.

A target is a function ``render(resolved) -> str`` (pure: a resolved job in, the text of what
would be submitted out; bad input is an HpclaunchError, one line per problem, exit 2). The default,
``slurm``, is the sbatch script `render` has always printed. Targets are found by name: first in
BUILTIN (module, function: a module name as a string, so tests/layers.py counts it as an import),
then among the entry points of group ``hpclaunch.targets`` that installed packages declare
(``NAME = package.module:render``), as TorchX finds its schedulers. The entry points are read only
when a name is not built in: `importlib.metadata` and the scan of every installed distribution
cost more than the whole of `render`'s start-up budget (docs/benchmarks.md).
"""
from __future__ import annotations

import importlib
from typing import Callable

from hpclaunch.common.errors import HpclaunchError

GROUP = "hpclaunch.targets"
DEFAULT = "slurm"
# name -> (module, function). A built-in name cannot be taken over by an entry point.
BUILTIN = {
    "slurm": ("hpclaunch.launchers.render", "render_job"),
    "kubernetes": ("hpclaunch.launchers.targets.kubernetes", "render"),
}

Render = Callable[[object], str]


def renderer(name: str | None) -> Render:
    """The render function of target ``name`` (None: the default), or an HpclaunchError naming the
    known targets."""
    name = DEFAULT if name is None else name
    if name in BUILTIN:
        module, function = BUILTIN[name]
        return getattr(importlib.import_module(module), function)
    found = _entry_points().get(name)
    if found is None:
        raise HpclaunchError(f"--target {name!r}: no such target \u2014 use one of {', '.join(names())} "
                             f"(a package adds one with an entry point in group {GROUP})")
    try:
        render = found.load()
    except Exception as e:  # a broken third-party package: its error, one line, not a traceback
        raise HpclaunchError(f"--target {name!r}: its entry point {found.value!r} does not load: "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} \u2014 "
                             f"reinstall or fix the package that declares it") from None
    if not callable(render):
        raise HpclaunchError(f"--target {name!r}: its entry point {found.value!r} is not a function "
                             f"render(resolved) -> str \u2014 fix the package that declares it")
    return render


def names() -> list[str]:
    """Every target's name: the built-in ones, then those installed packages add."""
    return list(BUILTIN) + sorted(n for n in _entry_points() if n not in BUILTIN)


def _entry_points() -> dict:
    from importlib import metadata  # only here: see the module's docstring
    eps = metadata.entry_points()
    group = eps.select(group=GROUP) if hasattr(eps, "select") else eps.get(GROUP, ())  # Python 3.9's dict
    out: dict = {}
    for ep in group:
        out.setdefault(ep.name, ep)  # the first installed wins, as importlib.metadata orders them
    return out
