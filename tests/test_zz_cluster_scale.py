"""Scale: one MPI job over 16 nodes x 1 rank through `hpclaunch submit --wait` (runs last by name).

It replaces the usual 2-node test cluster with a 16-node one (2 CPUs per node) and puts the
2-node cluster back afterwards, whatever happens, so later tests and sessions see the usual one.
"""
import os
import re
import subprocess
import sys
import time

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES = 16


def _wait_for_empty_queue(limit_s: float = 300) -> None:
    """Restarting the cluster cancels every job: give anyone else's jobs a chance to finish first."""
    deadline = time.time() + limit_s
    while time.time() < deadline:
        proc = subprocess.run(["squeue", "-h"], capture_output=True, text=True)
        if proc.returncode == 0 and not proc.stdout.strip():
            return
        time.sleep(2)


@pytest.fixture
def cluster16(slurm):
    cluster_fixture = sys.modules["hpclaunch_cluster_fixture"]  # loaded by conftest.py
    _wait_for_empty_queue()
    try:
        env = cluster_fixture.ensure_cluster(nodes=NODES)
        os.environ.update(env)
        yield env
    finally:
        _wait_for_empty_queue(60)
        os.environ.update(cluster_fixture.ensure_cluster(nodes=2))


def test_mpi_allreduce_on_16_nodes(cluster16, hpc_home, tmp_path):
    sinfo = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c %T"], capture_output=True, text=True, check=True)
    nodes = {line.split()[0]: int(line.split()[1]) for line in sinfo.stdout.splitlines() if line.strip()}
    assert sorted(nodes) == sorted(f"c{i}" for i in range(1, NODES + 1)), sinfo.stdout
    job = tmp_path / "scale.yaml"
    # testcluster's node says cpus: 4, but these nodes have 2: one rank x 1 CPU per node fits.
    job.write_text(f"""
name: scale-16
profile: testcluster
launcher: mpi
command: [python, {ROOT}/examples/mpi_allreduce.py]
resources: {{nodes: {NODES}, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
""")
    cpus = 1 * 1  # tasks_per_node x cpus_per_task: what the job asks of each node
    assert cpus <= min(nodes.values()), nodes
    t0 = time.monotonic()
    proc = hl("submit", str(job), "--backend", "slurm", "--wait", check=False, cwd=str(tmp_path), timeout=300)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, f"{proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    job_id = re.search(r"submitted slurm job (\d+)", proc.stdout).group(1)
    assert run_dir == str(tmp_path / "runs" / f"scale-16-{job_id}")
    hosts = {}
    for rank in range(NODES):
        text = open(os.path.join(run_dir, "logs", "attempt0", f"rank{rank}.log")).read()
        assert f"rank {rank}/{NODES} " in text and "sum 136 ok" in text, (rank, text)
        hosts[rank] = text.split(" host ")[1].split()[0]
    assert sorted(hosts.values(), key=lambda h: int(h[1:])) == [f"c{i}" for i in range(1, NODES + 1)], hosts
    print(f"16-node MPI job {job_id}: submit --wait {elapsed:.1f} s")
