"""`launcher: accelerate` on the Slurm test cluster: a user's unchanged Accelerate training loop
(examples/accelerate_train.py) on 2 nodes x 2 ranks is one 4-process world; under `launcher:
srun` the same program trains four times alone, each thinking it is the whole job."""
import os
import re

import pytest
from hlcli import hl, job_file

pytest.importorskip("accelerate")
pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "examples", "accelerate_train.py")
LINE = re.compile(r"^process (\d+) of (\d+) on (\S+) batches (\d+) loss (\S+)$", re.M)


def _run(tmp_path, launcher):
    job = job_file(tmp_path, f"""
name: accelerate-{launcher}
profile: testcluster
launcher: {launcher}
command: [python, {PROGRAM}, "3"]
resources: {{nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""", f"{launcher}.yaml")
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False, timeout=400)
    run_dir = os.path.join(str(tmp_path), "runs")
    logs = ""
    for dirpath, _, files in os.walk(run_dir):
        logs += "".join(open(os.path.join(dirpath, f)).read() for f in sorted(files) if re.fullmatch(r"rank\d+\.log", f))
    assert proc.returncode == 0, (proc.stderr, logs[-3000:])
    return [(int(a), int(b), host, int(n), float(loss)) for a, b, host, n, loss in LINE.findall(logs)]


def test_an_accelerate_loop_on_two_nodes_is_one_world(slurm, hpc_home, tmp_path):
    lines = _run(tmp_path, "accelerate")
    assert sorted(p for p, *_ in lines) == [0, 1, 2, 3], lines
    assert {size for _, size, *_ in lines} == {4}, lines
    assert sorted(host for _, _, host, _, _ in lines) == ["c1", "c1", "c2", "c2"], lines
    assert {n for *_, n, _ in lines} == {3 * 512 // 16 // 4}, lines   # each process saw a quarter of the data
    losses = [loss for *_, loss in lines]
    # one model (trained: an untrained one's loss is ~200, the targets' variance)
    assert max(losses) - min(losses) < 1e-6 and losses[0] < 20, lines


def test_the_same_loop_under_srun_trains_four_times_alone(slurm, hpc_home, tmp_path):
    lines = _run(tmp_path, "srun")
    assert [(p, size) for p, size, *_ in lines] == [(0, 1)] * 4, lines   # four worlds of one, each "process 0"
    assert {n for *_, n, _ in lines} == {3 * 512 // 16}, lines   # each read all the data: four trainings
