"""hpclaunch's job runtime: job.sh, the bash library every rendered job script sources (its logic:
the run directory, the rank wrapper, the local step, signals, the port, the monitor, the attempt's
end, and the launches that are more than a step: Ray's cluster per job, TensorFlow's workers), so
that a script carries only the job's values. A leaf: it imports nothing of hpclaunch.

A script finds it through $HPCLAUNCH_RUNTIME (set by hpclaunch's backends at submit, beside
$HPCLAUNCH_PYTHON: no Python start in the job), else `"$HPCLAUNCH_PYTHON" -m hpclaunch.runtime
--path` (a script given straight to sbatch), and sources it with the runtime version it was
rendered for; job.sh refuses another one (docs/architecture.md).
"""
import os

# The version rendered scripts name (templates/prologue.j2) and job.sh serves; tests/test_job_runtime.py
# checks that the three agree. Bump it with job.sh's when a rendered script would trip over a change.
VERSION = 1


def path() -> str:
    """The library's file."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "job.sh")
