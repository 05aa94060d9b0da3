"""The job file's recovery settings (resources.spare_nodes, recovery:) as validation refuses them and as
the script carries them (docs/recovery.md)."""
import re

import pytest

from hpclaunch.common.checkpoint_interval import interval_s, mtbf_s
from hpclaunch.launchers.render import render_job
from hpclaunch.spec.loading import resolve_job

GOOD = "name: j\ncommand: [python, train.py]\nprofile: testcluster\n"


def _lines(run_cli, write, text):
    code, out, err = run_cli("validate", write("job.yaml", text))
    return code, err.strip().splitlines()


@pytest.mark.parametrize("text,path,words", [
    (GOOD + "launcher: ray\nresources: {nodes: 2, spare_nodes: 1}\n", "resources.spare_nodes",
     "launcher ray cannot run its step again on a spare node"),
    (GOOD + "launcher: srun\nrecovery: {shrink: true}\nresources: {nodes: 2}\n", "recovery.shrink",
     "launcher srun cannot go on with fewer nodes"),
    (GOOD + "resources: {nodes: 2}\nrecovery: {min_nodes: 3, shrink: true}\n", "recovery.min_nodes",
     "is more than the job's 2 node(s)"),
    (GOOD + "recovery: {hang: {floor: 600, ceiling: 60}}\n", "recovery.hang.floor", "is above the ceiling (60 s)"),
    (GOOD + "recovery: {checkpoint_interval: sometimes}\n", "recovery.checkpoint_interval",
     "use auto, off, or a number of seconds"),
    (GOOD + "recovery: {checkpoint_interval: 0}\n", "recovery.checkpoint_interval", "is out of range"),
    (GOOD + "recovery: {heartbeat_timeout: 1}\n", "recovery.heartbeat_timeout", "must be at least 2"),
    (GOOD + "resources: {spare_nodes: -1}\n", "resources.spare_nodes", "must be at least 0"),
    (GOOD + "slurm: {extra: [--no-kill]}\n", "slurm.extra[0]", "set resources.spare_nodes"),
    ("name: j\ncommand: [python, train.py]\nresources: {spare_nodes: 1}\n", "resources.spare_nodes",
     "profile 'local' allows at most 1 node(s) in all"),
])
def test_recovery_settings_refused_in_one_line(run_cli, write, text, path, words):
    code, lines = _lines(run_cli, write, text)
    assert code == 2 and len(lines) == 1, lines
    assert f": {path}: " in lines[0] and words in lines[0], lines


def test_spares_ask_for_more_nodes_and_keep_the_allocation(tmp_path):
    script = render_job(resolve_job("tests/golden/job.yaml", ["profile=testcluster", "resources.spare_nodes=1",
                                                              "recovery.hang.floor=30"]))
    assert "#SBATCH --nodes=3\n" in script and "#SBATCH --no-kill\n" in script
    line = re.search(r"^hl_recovery .*$", script, re.M).group(0)
    # auto: the first start's interval, Daly's for the prior cost (30 s) and the default rate on 2 nodes
    mtbf = mtbf_s(None, 2)
    assert line == ("hl_recovery on=yes nodes=2 spares=1 hang=3.0:30.0:1800.0:0.05 heartbeat=10 shrink=0 "
                    f"checkpoint=auto:{interval_s(30, mtbf):.0f}:{mtbf:.0f} cost=30 rate=none")
    # the launch section is a function the runtime runs again for a restart
    assert re.search(r"^hl_launch\(\) \{\n(.|\n)*^\}\nhl_supervise hl_launch\n\Z", script, re.M)


def test_without_spares_the_allocation_is_the_jobs_and_a_node_failure_ends_it():
    script = render_job(resolve_job("tests/golden/job.yaml", ["profile=testcluster"]))
    assert "#SBATCH --nodes=2\n" in script and "--no-kill" not in script
    off = render_job(resolve_job("tests/golden/job.yaml", ["profile=testcluster", "recovery.enabled=false",
                                                           "recovery.hang.enabled=false",
                                                           "recovery.checkpoint_interval=off"]))
    assert " on=no " in off and " hang=off " in off and " checkpoint=off " in off


def test_torchrun_shrinks_to_min_nodes_through_its_elastic_node_range():
    script = render_job(resolve_job("tests/golden/job.yaml", ["profile=testcluster", "recovery.shrink=true"]))
    assert 'torchrun --nnodes=1:"$HPCLAUNCH_STEP_NODES" ' in script and "#SBATCH --no-kill\n" in script
    assert " shrink=1 " in script
