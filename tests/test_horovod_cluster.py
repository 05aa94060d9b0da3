"""Horovod through hpclaunch on the real Slurm test cluster (2 nodes x 2 ranks, CPU), both starters.

- The shipped testcluster profile says `horovod: {starter: srun}`: srun --mpi=pmix starts the ranks and
  hvd.init() joins them with Horovod's MPI controller (no ssh needed).
- A profile extending it with `starter: horovodrun, controller: gloo` makes the batch script run
  horovodrun on the first node, which reaches the second node with ssh (slurm-up.sh runs an sshd in
  every node's namespace and keeps the key in STATEDIR/ssh), like on a cluster with host-based ssh.

Needs Horovod (built with PyTorch and MPI) in this venv: `make horovod` (tests/horovod/build-horovod.sh).
Without it these tests fail in CI (CI=true) and skip elsewhere.
"""
import json
import os
import subprocess
import sys

import pytest
from hlcli import hl

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


def write_ssh_profile(folder, slurm_env) -> str:
    """A profile in FOLDER/hpc_profiles that starts ranks with horovodrun over the test cluster's ssh."""
    key = os.path.join(os.path.dirname(slurm_env["SLURM_CONF"]), "ssh", "id_ed25519")
    assert os.path.isfile(key), f"slurm-up.sh made no ssh key at {key}"
    (folder / "hpc_profiles").mkdir(exist_ok=True)
    (folder / "hpc_profiles" / "testcluster-ssh.yaml").write_text(f"""
name: testcluster-ssh
description: the test cluster, ranks started by horovodrun over ssh
extends: testcluster
horovod:
  starter: horovodrun
  controller: gloo
  extra_args: [--ssh-identity-file, {key}]
""")
    return "testcluster-ssh"


def write_job(tmp_path, name, *hvd_args, profile="testcluster", steps=30):
    job = tmp_path / "job.yaml"
    job.write_text(f"""
name: {name}
profile: {profile}
launcher: horovod
command: [python, {EXAMPLES}/hvd_check.py, --steps, "{steps}"{"".join(f", {a}" for a in hvd_args)}]
resources: {{nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""")
    return job


def submit_wait(tmp_path, name, *hvd_args, check=True, profile="testcluster"):
    job = write_job(tmp_path, name, *hvd_args, profile=profile)
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


def test_horovodrun_two_nodes_over_ssh(slurm, hpc_home, horovod, tmp_path):
    profile = write_ssh_profile(tmp_path, slurm)
    proc, run_dir, logs = submit_wait(tmp_path, "hvdrun two nodes", profile=profile)
    with open(os.path.join(run_dir, "script.sbatch")) as f:
        script = f.read()
    assert "horovodrun -np 4 -H" in script and "--gloo" in script and "--ssh-identity-file" in script, script
    # The gloo controller only exists under horovodrun (its rendezvous server): ranks 2 and 3 on c2
    # were started by horovodrun on c1 over ssh, not by srun.
    hosts = {r: logs[r].split(" host ")[1].split()[0] for r in range(4)}
    assert hosts == HOSTS, (hosts, logs)
    for r in range(4):
        assert "controller gloo" in logs[r], logs[r]
        assert "params identical: True" in logs[r], logs[r]
    st = json.loads(hl("status", "hvdrun two nodes", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0, st


def _ranks_in_namespace(ns: str) -> list[str]:
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    cmds = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "hvd_check.py" in cmd:
            cmds.append(f"{pid}: {cmd}")
    return cmds


def test_horovodrun_cancel_leaves_no_rank_on_the_ssh_node(slurm, hpc_home, horovod, tmp_path):
    # Ranks started over ssh are outside Slurm's job: scancel cannot reach them. They must still go
    # when horovodrun's ssh sessions close.
    import time
    profile = write_ssh_profile(tmp_path, slurm)
    job = write_job(tmp_path, "hvdrun cancel", profile=profile, steps=10_000_000)
    hl("submit", str(job), "--backend", "slurm", cwd=str(tmp_path))
    deadline = time.monotonic() + 120
    while len(_ranks_in_namespace("sn2")) < 2:
        assert time.monotonic() < deadline, "the ranks on c2 never started"
        time.sleep(1)
    hl("cancel", "hvdrun cancel", cwd="/")
    deadline = time.monotonic() + 60
    while _ranks_in_namespace("sn2"):
        assert time.monotonic() < deadline, f"ranks left on c2 after cancel: {_ranks_in_namespace('sn2')}"
        time.sleep(1)
    st = json.loads(hl("status", "hvdrun cancel", "--json", cwd="/").stdout)
    assert st["state"] == "CANCELLED", st
