"""The launchers are one module each (launchers/modes/), in one registry that feeds the job schema,
validation, `init` and its --launcher choices, the plan and the script; another package adds one
through the entry point group hpclaunch.launchers, with no edit to hpclaunch."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpclaunch.cli import parser
from hpclaunch.common.rankenv import KINDS
from hpclaunch.launchers import modes
from hpclaunch.launchers.plan import build_plan
from hpclaunch.spec.job import Job
from hpclaunch.spec.loading import resolve_job
from hpclaunch.spec.typedload import json_schema
from hpclaunch.train_entry import distenv

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(os.path.dirname(HERE), "templates")
JOB = os.path.join(HERE, "golden", "job.yaml")


def test_each_built_in_launcher_is_one_module_with_its_template():
    assert modes.names()[:len(modes.BUILT_IN)] == modes.BUILT_IN
    for name in modes.BUILT_IN:
        mode = modes.get(name)
        assert mode.name == name and mode.rank_env in KINDS
        assert mode.template == f"{name}.j2" and os.path.exists(os.path.join(TEMPLATES, mode.template))
        assert (name, *mode.starters[0][1:]) == mode.starters[0]


def test_train_entry_reads_every_kind_a_launcher_can_declare():
    assert set(distenv._DETECTORS) == set(KINDS)
    # the script's word wins over the order tried without it: an srun step whose program set RANK
    env = {"HPCLAUNCH_RANK_ENV": "srun", "RANK": "0", "WORLD_SIZE": "1", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
           "SLURM_STEP_ID": "0"}
    assert (distenv.detect(env).launcher, distenv.detect(env).rank) == ("srun", 3)
    env = {"HPCLAUNCH_RANK_ENV": "horovod", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0"}
    assert (distenv.detect(env).launcher, distenv.detect(env).world_size) == ("horovod", 2)
    # a kind whose variables are absent (the batch shell of a torchrun job) is not forced
    assert distenv.detect({"HPCLAUNCH_RANK_ENV": "torchrun", "SLURM_PROCID": "0"}).launcher == "single"


def test_the_registry_feeds_the_schema_init_and_validation(tmp_path):
    assert json_schema(Job)["properties"]["launcher"]["enum"] == list(modes.names())
    init = parser.build("init")
    assert {"jax", "lightning"} | set(modes.BUILT_IN) <= set(modes.starters())
    for mode in modes.starters():
        assert init.parse_args(["init", "--launcher", mode]).launcher == mode
    with pytest.raises(SystemExit):
        init.parse_args(["init", "--launcher", "nope"])
    for name in modes.BUILT_IN:
        plan = build_plan(resolve_job(JOB, [f"launcher={name}", "profile=testcluster"]))
        mode = modes.get(name)
        assert (plan.rank_env, plan.launch_template) == (mode.rank_env, mode.template)
        assert plan.step_tasks == (1 if mode.per_node else plan.tasks_per_node)


PLUGIN = '''"""A launcher of another package: echo each rank's place, started by hpclaunch's step helper."""
import shlex

NAME = "echoer"
RANK_ENV = "srun"
STARTER = ("[python, -c, 'print(1)']", "each rank prints its place")


def problems(job, profile):
    if job.resources.nodes > 2:
        yield ("resources.nodes", "echoer runs on two nodes at most", job.resources.nodes, "use nodes <= 2")


def launch_text(plan):
    return (f"echo {shlex.quote('echoer for ' + plan.job_name)}\\n"
            f"hl_step {plan.tasks_per_node} --cpus-per-task={plan.cpus_per_task} -- "
            '"${hl_rank_log[@]}" "${hl_cmd[@]}" &\\n')
'''


def test_a_launcher_another_package_installs_needs_no_edit_here(tmp_path):
    (tmp_path / "hl_echoer.py").write_text(PLUGIN)
    info = tmp_path / "hl_echoer-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hl-echoer\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hpclaunch.launchers]\nechoer = hl_echoer\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: it's mine\nprofile: testcluster\nlauncher: echoer\ncommand: [hostname]\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")

    def hl(*args):
        return subprocess.run([sys.executable, "-m", "hpclaunch", *args], capture_output=True, text=True, env=env,
                              cwd=str(tmp_path))

    out = hl("render", "job.yaml")
    assert out.returncode == 0, out.stderr
    # its text is the launch section the job runtime runs (again, on a restart: docs/recovery.md)
    assert "hl_launch() {\necho 'echoer for it'\"'\"'s mine'\nhl_step 2 " in out.stdout
    assert "export HPCLAUNCH_RANK_ENV=srun\n" in out.stdout and "\nhl_supervise hl_launch\n" in out.stdout
    assert subprocess.run(["bash", "-n"], input=out.stdout, text=True).returncode == 0
    bad = hl("validate", "job.yaml", "-o", "resources.nodes=3")
    assert bad.returncode == 2 and "resources.nodes: echoer runs on two nodes at most (3)" in bad.stderr, bad.stderr
    assert hl("init", "e.yaml", "--launcher", "echoer", "--profile", "testcluster").returncode == 0
    assert "launcher: \"echoer\"" in (tmp_path / "e.yaml").read_text()
    schema = json.loads(hl("schema").stdout)
    assert schema["properties"]["launcher"]["enum"][-1] == "echoer"
    typo = hl("validate", "job.yaml", "-o", "launcher=echoe")
    assert "did you mean 'echoer'?" in typo.stderr, typo.stderr
