"""Pure rendering: a resolved job to the text of its batch script, through the plan
(launchers/plan.py) and the Slurm backend's translation (backends/slurm_script.py): the script
`hpclaunch render` prints, `hpclaunch submit` gives sbatch, and the local backend runs under its
Slurm emulation. Templates in templates/,
through launchers/templating.py."""
from __future__ import annotations

from hpclaunch.launchers.backends import slurm_script
from hpclaunch.launchers.plan import Plan, build_plan


def render_script(plan: Plan) -> str:
    return slurm_script.prepare(plan).script


def render_job(resolved) -> str:
    return render_script(build_plan(resolved))
