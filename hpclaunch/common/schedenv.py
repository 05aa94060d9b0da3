"""The scheduler's variables, as the layers below the backends need them: by their prefix only.

A job's scheduler sets its own variables (Slurm's all start SLURM_, and the local backend's Slurm
emulation sets the same): a job file or profile may not set them (spec/job.py), and a container
runtime that passes in only what it is told (podman) must pass them all (launchers/container.py).
The one module below the backends that names them (tests/layers.py, the scheduler-words rule).
"""
from __future__ import annotations

PREFIXES = ("SLURM_",)
