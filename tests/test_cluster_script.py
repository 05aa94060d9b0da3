"""Fast checks of the throwaway Slurm test cluster (tests/cluster/slurm-up.sh, slurm-down.sh).

Needs root. In CI (CI=true) these must run; elsewhere without root they are skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

_spec = importlib.util.spec_from_file_location(
    "hpclaunch_cluster_fixture", Path(__file__).resolve().parent / "cluster" / "fixture.py"
)
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


@pytest.fixture(scope="module")
def slurm_env():
    fx.cluster_available_or_skip()
    return fx.ensure_cluster(nodes=2)


def _run(args, env, timeout=60):
    return subprocess.run(args, env=fx.client_env(env), capture_output=True, text=True, timeout=timeout)


def test_cluster_comes_up(slurm_env):
    conf = slurm_env["SLURM_CONF"]
    assert Path(conf).is_file()
    assert (Path(conf).parent / "env.sh").read_text().strip() == f"export SLURM_CONF={conf}"
    res = _run(["scontrol", "ping"], slurm_env)
    assert res.returncode == 0 and "is UP" in res.stdout, res.stdout + res.stderr
    res = _run(["sinfo", "-h", "-N", "-o", "%N %t %P"], slurm_env)
    rows = sorted(res.stdout.split("\n")[:-1])
    assert rows == ["c1 idle debug*", "c2 idle debug*"], res.stdout + res.stderr


def test_up_is_idempotent(slurm_env):
    res = subprocess.run(
        ["bash", str(fx.UP), "-n", "2", "-d", fx.statedir()], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"export SLURM_CONF={slurm_env['SLURM_CONF']}\n"
    assert "reusing" in res.stderr


def test_two_nodes_have_distinct_hostnames(slurm_env):
    res = _run(["srun", "-N2", "--ntasks-per-node=1", "hostname"], slurm_env)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["c1", "c2"]


def test_every_node_takes_ssh_with_the_cluster_key(slurm_env):
    # horovodrun reaches remote nodes with ssh; the key is STATEDIR/ssh/id_ed25519, nothing in ~/.ssh.
    key = Path(fx.statedir()) / "ssh" / "id_ed25519"
    for node in ("c1", "c2"):
        res = _run(["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                    "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", node, "hostname"], slurm_env)
        assert res.returncode == 0 and res.stdout.strip() == node, (node, res.stdout, res.stderr)
    # Only that key: ssh without it (no agent, no other identity) is refused.
    res = _run(["ssh", "-F", "/dev/null", "-o", "IdentitiesOnly=yes", "-o", "IdentityFile=/dev/null",
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "c2", "hostname"], slurm_env)
    assert res.returncode != 0 and "c2" not in res.stdout, (res.stdout, res.stderr)


def test_time_over_partition_limit_is_refused(slurm_env):
    # The debug partition has MaxTime=60 (minutes) and EnforcePartLimits=ALL.
    res = _run(["sbatch", "--test-only", "--time=61", "--wrap", "true"], slurm_env)
    assert res.returncode != 0
    assert "time limit" in res.stderr.lower(), res.stderr


def test_down_leaves_nothing_and_up_restores(slurm_env):
    sd = Path(fx.statedir())
    pid_files = list((sd / "run").glob("*.pid"))
    pids = [int(p.read_text().strip()) for p in pid_files if p.read_text().strip().isdigit()]
    assert pids, "no daemon pid files while the cluster is up"

    fx.stop_cluster()

    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert not [n for n in netns if n.startswith("sn")], netns
    assert subprocess.run(["ip", "link", "show", "br-slurm"], capture_output=True).returncode != 0
    assert "hpclaunch-slurm-test" not in Path("/etc/hosts").read_text()
    for pid in pids:  # gone, or a zombie waiting for the lazy PID 1 to reap it
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        assert state in ("Z", "X"), f"pid {pid} still running (state {state})"
    # Idempotent: a second teardown with nothing up succeeds.
    fx.stop_cluster()

    # Leave the session's cluster as other tests expect it.
    env = fx.ensure_cluster(nodes=2)
    assert env == slurm_env
