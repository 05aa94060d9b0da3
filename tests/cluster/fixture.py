"""pytest helpers for the throwaway Slurm test cluster (tests/cluster/slurm-up.sh / slurm-down.sh).

Meant to be wired into tests/conftest.py as a session fixture, e.g.::

    # tests/ has no __init__.py, so load this file by path (as tests/test_cluster_script.py does)
    fx = load_module("tests/cluster/fixture.py")

    @pytest.fixture(scope="session")
    def slurm_cluster():
        fx.cluster_available_or_skip()
        env = fx.ensure_cluster(nodes=2)
        return env  # pass env=fx.client_env(env) to sbatch/srun/... subprocess calls

Rules (from the project's test policy):

* The cluster needs root (network namespaces, /etc/hosts, daemons as SlurmUser=root).
* In CI (``CI=true``) cluster tests must run: a missing prerequisite is a failure, never a skip.
* Elsewhere, without root, they are skipped with the reason printed.

The cluster is started once and reused: across tests, across test sessions, and across processes
(slurm-up.sh is idempotent and serializes callers with a flock). Tests that need another node count get
the running cluster torn down and the requested one started.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UP = HERE / "slurm-up.sh"
DOWN = HERE / "slurm-down.sh"

#: Where the cluster keeps config, state and logs. Override with HPCLAUNCH_SLURM_STATEDIR.
DEFAULT_STATEDIR = "/tmp/hpclaunch-slurm"

#: Address of the host as seen from inside jobs: the nodes live in their own network namespaces and
#: cannot reach the host's 127.0.0.1 (a test that starts a local server must bind/advertise this one).
HOST_ADDR_FROM_JOBS = "10.200.0.1"

_UP_TIMEOUT_S = 300  # apt-get install on a fresh CI machine is ~30 s; bring-up is seconds.


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def statedir() -> str:
    return os.environ.get("HPCLAUNCH_SLURM_STATEDIR", DEFAULT_STATEDIR)


def _why_unavailable() -> str | None:
    """Reason the cluster cannot be started here, or None if it can."""
    if not sys.platform.startswith("linux"):
        return "the Slurm test cluster needs Linux"
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (network namespaces, /etc/hosts, daemons)"
    for tool in ("bash", "ip", "nsenter", "unshare", "flock"):
        if shutil.which(tool) is None:
            return f"the Slurm test cluster needs {tool!r} on PATH"
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        return "Slurm is not installed and there is no apt-get to install it"
    return None


def cluster_available_or_skip() -> None:
    """Skip the calling test (outside CI) or fail it (in CI) if the cluster cannot run here."""
    require_or_skip(_why_unavailable(), "cluster tests")


def require_or_skip(reason: str | None, what: str = "this test") -> None:
    """A missing prerequisite (`reason`, None when there is none) skips the calling test outside CI
    and fails it in CI (CI=true): there, a test that cannot run is a broken setup, not a pass."""
    import pytest

    if reason is None:
        return
    if _in_ci():
        pytest.fail(f"CI=true but {reason}: {what} must run in CI", pytrace=False)
    print(f"SKIP {what}: {reason}", file=sys.stderr)
    pytest.skip(reason)


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _running_cluster_id(sd: str) -> dict[str, str]:
    """The settings slurm-up.sh recorded for the cluster in ``sd`` ({} if none)."""
    try:
        text = (Path(sd) / "cluster.id").read_text().strip()
    except OSError:
        return {}
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


def _env_from_up_output(stdout: str) -> dict[str, str]:
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    prefix = "export SLURM_CONF="
    if len(lines) != 1 or not lines[0].startswith(prefix):
        raise RuntimeError(f"unexpected slurm-up.sh stdout (want one export line): {stdout!r}")
    return {"SLURM_CONF": lines[0][len(prefix):]}


def ensure_cluster(nodes: int = 2, cpus: int | None = None, accounting: str = "dbd") -> dict[str, str]:
    """Start the test cluster (or reuse the running one) and return the env additions for clients.

    Reuses a healthy cluster with the same settings; tears down one of ours with other settings (e.g.
    another node count) and starts the requested one. Raises RuntimeError with slurm-up.sh's output
    (which includes the daemons' log tails) if it cannot come up.
    """
    sd = statedir()
    up = ["bash", str(UP), "-n", str(nodes), "-d", sd, "-a", accounting]
    if cpus is not None:
        up += ["-c", str(cpus)]

    res = _run(up, _UP_TIMEOUT_S)
    if res.returncode == 3 and _running_cluster_id(sd):
        # Ours, other settings: slurm-up.sh refuses to clobber it by design; the fixture may.
        have = _running_cluster_id(sd)
        print(f"slurm fixture: replacing running cluster {have} with nodes={nodes}", file=sys.stderr)
        stop_cluster()
        res = _run(up, _UP_TIMEOUT_S)
    if res.returncode != 0:
        raise RuntimeError(
            f"slurm-up.sh failed (rc={res.returncode}): {' '.join(up)}\n"
            f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}"
        )
    return _env_from_up_output(res.stdout)


def stop_cluster() -> None:
    """Tear the test cluster down (idempotent). CI should also call slurm-down.sh from an EXIT trap."""
    res = _run(["bash", str(DOWN), "-d", statedir()], 180)
    if res.returncode != 0:
        raise RuntimeError(f"slurm-down.sh failed (rc={res.returncode}):\n{res.stderr}")


def client_env(extra: dict[str, str]) -> dict[str, str]:
    """os.environ plus ``extra``, for subprocess calls of sbatch/srun/... against the test cluster."""
    env = dict(os.environ)
    env.update(extra)
    return env


# --- a node's death and return (docs/recovery.md; tests/test_zy_recovery_cluster.py, bench/goodput) ---

def node_pids(i: int) -> list[int]:
    """Every process in node cI's network namespace (its slurmd, sshd, job steps and ranks)."""
    res = _run(["ip", "netns", "pids", f"sn{i}"], 30)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def kill_node(i: int) -> int:
    """Node cI dies: SIGKILL to every process in its namespace (its network stays: the others see its
    connections close, as when a machine's processes all die). Returns how many were killed."""
    import signal
    killed = 0
    for _ in range(5):                      # what forked while we killed
        pids = node_pids(i)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def revive_node(i: int, timeout: float = 120.0) -> None:
    """Node cI back: its slurmd and sshd started as slurm-up.sh starts them, then until Slurm has it
    up again (ReturnToService=2 returns a node that was marked down once its slurmd registers)."""
    import time
    sd = statedir()
    for cmd in (f"hostname c{i}; exec slurmd -N c{i}",
                f"hostname c{i}; exec /usr/sbin/sshd -f '{sd}/ssh/sshd_config' -o ListenAddress=10.200.0.{10 + i} "
                f"-o PidFile='{sd}/run/sshd-c{i}.pid' -E '{sd}/log/sshd-c{i}.log'"):
        subprocess.run(["nsenter", f"--net=/run/netns/sn{i}", "unshare", "--uts", "bash", "-c", cmd],
                       check=True, timeout=60, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, close_fds=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = _run(["sinfo", "-h", "-n", f"c{i}", "-o", "%T"], 30).stdout.strip()
        if state and not any(w in state for w in ("down", "drain", "fail", "not_responding", "*")):
            return
        if "down" in state or "drain" in state:
            _run(["scontrol", "update", f"nodename=c{i}", "state=resume"], 30)
        time.sleep(1)
    raise RuntimeError(f"node c{i} did not come back within {timeout:.0f} s (sinfo: {state!r})")
