"""Horovod through hpclaunch on the real Slurm test cluster (2 nodes x 2 ranks, CPU).

The test cluster has no ssh between nodes, so horovodrun cannot start remote ranks there; the
testcluster profile says `horovod: {starter: srun}`: srun --mpi=pmix starts the ranks and hvd.init()
joins them with Horovod's MPI controller.

Needs Horovod (built with PyTorch and MPI) in this venv: `make horovod` (tests/horovod/build-horovod.sh).
Without it these tests fail in CI (CI=true) and skip elsewhere.
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
HOSTS = {0: "c1", 1: "c1", 2: "c2", 3: "c2"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def horovod():
    """Horovod with PyTorch and MPI importable by this interpreter (the one jobs run with)."""
    probe = "import horovod.torch as hvd; assert hvd.mpi_built(), 'Horovod was built without MPI'"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        return
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    reason = (f"Horovod is not usable in {sys.prefix} ({last}): run `make horovod` "
              f"(tests/horovod/build-horovod.sh)")
    if _in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason)


def hl(*args, cwd, check=True, timeout=300):
    proc = subprocess.run([sys.executable, "-m", "hpclaunch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if check:
        assert proc.returncode == 0, f"hpclaunch {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def submit_wait(tmp_path, name, *hvd_args, check=True):
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: {name}
profile: testcluster
launcher: horovod
command: [python, {EXAMPLES}/hvd_check.py, --steps, "30"{"".join(f", {a}" for a in hvd_args)}]
resources: {{nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""")
    proc = hl("submit", str(job), "--backend", "slurm", "--wait", cwd=str(tmp_path), check=check)
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    logs = {}
    for r in range(4):
        path = os.path.join(run_dir, "logs", "attempt0", f"rank{r}.log")
        assert os.path.exists(path), f"no log for rank {r} in {run_dir}:\n{proc.stdout}\n{proc.stderr}\n" + \
            _slurm_out(run_dir)
        with open(path) as f:
            logs[r] = f.read()
    return proc, run_dir, logs


def _slurm_out(run_dir):
    try:
        with open(os.path.join(run_dir, "logs", "slurm.out")) as f:
            return f.read()[-4000:]
    except OSError:
        return "(no slurm.out)"


def test_horovod_two_nodes_params_identical(slurm, hpc_home, horovod, tmp_path):
    proc, run_dir, logs = submit_wait(tmp_path, "hvd two nodes")
    hosts = {r: logs[r].split(" host ")[1].split()[0] for r in range(4)}
    assert hosts == HOSTS, (hosts, logs)
    for r in range(4):
        assert f"rank {r}/4 " in logs[r], logs[r]
        assert "controller mpi" in logs[r], logs[r]
        assert "params identical: True" in logs[r], logs[r]
    assert "rank hosts: 0=c1 1=c1 2=c2 3=c2" in logs[0], logs[0]
    st = json.loads(hl("status", "hvd two nodes", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0, st


def test_horovod_negative_control_fails(slurm, hpc_home, horovod, tmp_path):
    # Without DistributedOptimizer the ranks drift apart: the check must see it and the job must fail.
    proc, run_dir, logs = submit_wait(tmp_path, "hvd no sync", "--no-sync", check=False)
    assert all("params identical: False" in logs[r] for r in range(4)), logs
    st = json.loads(hl("status", "hvd no sync", "--json", cwd="/").stdout)
    assert st["state"] == "FAILED" and st["exit_code"] != 0, st
