"""`launcher: deepspeed`: a user's unchanged DeepSpeed program (examples/deepspeed_train.py:
`deepspeed.init_distributed()`, `deepspeed.initialize` with ZeRO stage 2) on 2 nodes x 2 ranks of
the Slurm test cluster is one 4-rank world, each process given the `--local_rank` DeepSpeed's
launcher passes; on the local backend, 1 node x 2 ranks, run as `python -u -m MODULE`.

DeepSpeed on the CPU JIT-compiles its shared-memory op (deepspeed_shm_comm) at
init_distributed(). The module's fixture builds it once, in this run's own TORCH_EXTENSIONS_DIR
(a compile killed half-way leaves a lock that hangs every later user of that folder; none is
shared with another run), and the jobs use it: ~80 s of CPU, 5 minutes on a loaded 2-core machine.
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest
from hlcli import hl, job_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+) --local_rank (-?\d+) LOCAL_RANK (\d+) loss (\S+) argv (.*)$", re.M)
PATH = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
BUILD = "from deepspeed.accelerator import get_accelerator; get_accelerator().create_op_builder('ShareMemCommBuilder').load()"


@pytest.fixture(scope="module")
def torch_extensions(tmp_path_factory, require):
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        require("deepspeed is not installed (make venv: the frameworks extra)", "tests/test_deepspeed_cluster.py")
    folder = str(tmp_path_factory.mktemp("torch_extensions"))
    start = time.monotonic()
    # The jobs' PATH (the Slurm backend puts this Python's folder first): their ninja, the venv's, throws
    # away a build log of another ninja version (Debian's /usr/bin/ninja) and builds everything again.
    proc = subprocess.run([sys.executable, "-c", BUILD], env=dict(os.environ, TORCH_EXTENSIONS_DIR=folder, PATH=PATH),
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"deepspeed_shm_comm built in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return folder


def _run(tmp_path, backend, command, resources, extensions, env=None):
    job = job_file(tmp_path, f"""
name: deepspeed-{backend}
profile: {"testcluster" if backend == "slurm" else "local"}
launcher: deepspeed
command: {command}
resources: {resources}
env: {{TORCH_EXTENSIONS_DIR: {extensions}{", PYTHONPATH: " + EXAMPLES if "-m" in command else ""}}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""")
    proc = hl("submit", job, "--backend", backend, "--wait", "--json", cwd=str(tmp_path), check=False, timeout=600,
              env=env)
    logs = ""
    for dirpath, _, files in os.walk(os.path.join(str(tmp_path), "runs")):
        logs += "".join(open(os.path.join(dirpath, f)).read() for f in sorted(files) if re.fullmatch(r"rank\d+\.log", f))
    assert proc.returncode == 0, (proc.stdout, proc.stderr, logs[-3000:])
    assert json.loads(hl("status", json.loads(proc.stdout)["run_dir"], "--json").stdout)["state"] == "COMPLETED"
    return [(int(r), int(w), host, int(lr), int(env_lr), float(loss), argv)
            for r, w, host, lr, env_lr, loss, argv in LINE.findall(logs)]


@pytest.mark.cluster
def test_a_deepspeed_program_on_two_nodes_is_one_world(slurm, hpc_home, tmp_path, torch_extensions):
    lines = _run(tmp_path, "slurm", f"[python, {EXAMPLES}/deepspeed_train.py]",
                 '{nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:10:00"}', torch_extensions)
    assert sorted(r for r, *_ in lines) == [0, 1, 2, 3], lines
    assert {w for _, w, *_ in lines} == {4}, lines
    # ranks 0, 1 on the first node, 2, 3 on the second, each told its place on its node
    hosts = {r: host for r, _, host, *_ in lines}
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3], lines
    assert sorted((r, lr, env_lr) for r, _, _, lr, env_lr, *_ in lines) == [(0, 0, 0), (1, 1, 1), (2, 0, 0), (3, 1, 1)]
    assert {argv for *_, argv in lines} == {"['--local_rank=0']", "['--local_rank=1']"}, lines
    # one model (trained: an untrained one's loss is ~190, the targets' variance)
    losses = [loss for *_, loss, _ in lines]
    assert max(losses) - min(losses) < 1e-6 and losses[0] < 10, lines


def test_a_deepspeed_module_on_the_local_backend(hpc_home, tmp_path, torch_extensions):
    """`python -u -m MODULE ARGS`: DeepSpeed's launcher puts --local_rank after the module (as its
    --module does), not before python's own options."""
    env = dict(os.environ, PATH=PATH)   # the local backend's job has the caller's PATH: deepspeed's there
    lines = _run(tmp_path, "local", '[python, -u, -m, deepspeed_train, --steps, "40"]',
                 "{nodes: 1, tasks_per_node: 2, cpus_per_task: 1}", torch_extensions, env=env)
    assert sorted((r, w, lr, env_lr) for r, w, _, lr, env_lr, *_ in lines) == [(0, 2, 0, 0), (1, 2, 1, 1)], lines
    assert sorted(argv for *_, argv in lines) == ["['--local_rank=0', '--steps', '40']",
                                                  "['--local_rank=1', '--steps', '40']"], lines
    losses = [loss for *_, loss, _ in lines]
    assert max(losses) - min(losses) < 1e-6 and losses[0] < 20, lines
