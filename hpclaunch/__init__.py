"""hpclaunch: run distributed training on Slurm clusters, and account for its energy and heat.

The package's API: `submit`, `Job`, `submit_function`, `map_function`, `executor`. They load on
first use, so `import hpclaunch` stays cheap for the CLI and for ranks (the top layer: see
docs/architecture.md).
"""

from hpclaunch.common.version import __version__

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
