"""hpclaunch: run distributed training on Slurm clusters, and account for its energy and heat.

The package's API: `submit`, `Job`, `submit_function`, `map_function`, `executor`. They load on
first use, so `import hpclaunch` stays cheap for the CLI and for ranks (the top layer: see
docs/architecture.md).
"""

import os as _os

# A source checkout keeps the subpackages setup.cfg's `package_dir` maps (launchers/, monitors/,
# reports/, train_entry/, templates/, hpc_profiles/) beside this folder, not in it; an install has
# them inside. When this `hpclaunch` is a checkout's (which Python imports whenever the checkout is
# the current or the script's folder, even with a wheel installed: the local runner, the monitors,
# `python -m hpclaunch`, a rank's `python -m hpclaunch.train_entry`), the repository root joins the
# package's search path, after the package's own folder, so `hpclaunch.launchers` is <root>/launchers
# and never a half package (docs/architecture.md, "Folders and the installed package").
_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "launchers")) and \
        _os.path.isfile(_os.path.join(_root, "launchers", "__init__.py")) and \
        _os.path.isfile(_os.path.join(_root, "setup.cfg")) and _root not in __path__:
    __path__.append(_root)
del _here, _root, _os

from hpclaunch.common.version import __version__  # noqa: E402

__all__ = ["submit", "Job", "submit_function", "map_function", "executor", "__version__"]

_API = {"submit": "hpclaunch.runs.submission", "Job": "hpclaunch.runs.jobs",
        "submit_function": "hpclaunch.runs.functions", "map_function": "hpclaunch.runs.functions",
        "executor": "hpclaunch.runs.functions"}


def __getattr__(name):
    if name in _API:
        import importlib
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'hpclaunch' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
