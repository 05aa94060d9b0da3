"""hpclaunch: run distributed training on Slurm clusters, and account for its energy and heat."""

__version__ = "0.1.0"

__all__ = ["submit", "Job", "submit_function", "map_function", "executor", "__version__"]


def __getattr__(name):  # lazy: `import hpclaunch` stays cheap for the CLI and for ranks
    if name == "submit":
        from hpclaunch.runs.submission import submit
        return submit
    if name == "Job":
        from hpclaunch.runs.jobs import Job
        return Job
    if name in ("submit_function", "map_function", "executor"):
        from hpclaunch.launchers import submitit_backend
        return getattr(submitit_backend, name)
    raise AttributeError(name)
