"""The cluster facts preflight reads, kept in the user cache (launchers/backends/slurm_facts.py): used
only fresh, for the same user and slurm.conf; never the reason a job is refused (a refusal is
checked live); dropped when sbatch refuses what they let through."""
import json
import os
import subprocess
import time

import pytest

from hlcli import hl
from hpclaunch.common.errors import InvalidInput
from hpclaunch.launchers.backends import slurm_facts
from hpclaunch.launchers.backends.slurm import SlurmBackend
from hpclaunch.launchers.plan import build_plan
from hpclaunch.runs.submission import sources_of
from hpclaunch.spec.loading import resolve_job

TEXTS = {"config": "ClusterName = ci\nMaxArraySize = 1001\n", "partition": "PartitionName=debug State=UP\n",
         "node": "NodeName=c1 CPUTot=4\n"}


@pytest.fixture
def conf(tmp_path, monkeypatch):
    path = tmp_path / "slurm.conf"
    path.write_text("ClusterName=ci\n")
    monkeypatch.setenv("SLURM_CONF", str(path))
    return path


def test_an_entry_is_used_fresh_and_for_the_same_slurm_conf_only(cache_home, conf, monkeypatch):
    assert slurm_facts.load() is None
    slurm_facts.store(TEXTS)
    assert slurm_facts.load() == TEXTS
    monkeypatch.setenv("HPCLAUNCH_SLURM_FACTS_MAX_AGE", "0")   # off: neither read nor written
    assert slurm_facts.load() is None
    monkeypatch.setenv("HPCLAUNCH_SLURM_FACTS_MAX_AGE", "300")
    real = time.time
    monkeypatch.setattr(slurm_facts.time, "time", lambda: real() + 301)
    assert slurm_facts.load() is None   # too old
    monkeypatch.setattr(slurm_facts.time, "time", real)
    assert slurm_facts.load() == TEXTS
    os.utime(conf, ns=(time.time_ns(), time.time_ns() + 10 ** 9))   # the cluster's configuration changed
    assert slurm_facts.load() is None
    slurm_facts.store(TEXTS)
    slurm_facts.forget()
    assert slurm_facts.load() is None


def test_nothing_is_kept_without_a_slurm_conf(cache_home, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "absent.conf"))   # configless: nothing to key it on
    slurm_facts.store(TEXTS)
    assert slurm_facts.load() is None


def _open_profile(tmp_path):
    """A profile that knows nothing of the cluster's partitions and limits: preflight must judge."""
    (tmp_path / "hpc_profiles").mkdir(exist_ok=True)
    (tmp_path / "hpc_profiles" / "open.yaml").write_text(
        "name: open\nextends: testcluster\nlimits: {partitions: [], max_time: null, max_nodes: null}\n")


def _job(tmp_path, text):
    _open_profile(tmp_path)
    path = tmp_path / "job.yaml"
    path.write_text("name: facts\nprofile: open\nlauncher: srun\ncommand: [hostname]\nmonitor: {interval: 0}\n"
                    + text)
    resolved = resolve_job(str(path))
    return SlurmBackend().prepare(build_plan(resolved)), sources_of(resolved)


def _live_texts():
    return {"config": subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout,
            "partition": subprocess.run(["scontrol", "-o", "show", "partition"], capture_output=True, text=True).stdout,
            "node": subprocess.run(["scontrol", "-o", "show", "node"], capture_output=True, text=True).stdout}


@pytest.mark.cluster   # the `slurm` fixture: without the mark, `-m "not cluster"` runs replaced a running cluster
def test_a_stale_entry_never_refuses_a_job(slurm, cache_home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # ./hpc_profiles/open.yaml
    live = _live_texts()
    stale = dict(live, partition=live["partition"].replace("MaxTime=01:00:00", "MaxTime=00:01:00"))
    assert stale["partition"] != live["partition"]
    slurm_facts.store(stale)
    request, sources = _job(tmp_path, "resources: {nodes: 1, tasks_per_node: 1, time: '00:05:00'}\n")
    be = SlurmBackend()
    be.prefetch(True)
    be.preflight(request, sources)   # the cached facts would refuse it: checked live, it passes
    assert "MaxTime=01:00:00" in slurm_facts.load()["partition"]   # and the live answer is kept
    # A request the live cluster refuses too is refused, with preflight's own line.
    request, sources = _job(tmp_path, "resources: {nodes: 1, tasks_per_node: 1, time: '00:59:00'}\n"
                                      "slurm: {partition: nosuch}\n")
    be = SlurmBackend()
    be.prefetch(True)
    with pytest.raises(InvalidInput, match="no such partition"):
        be.preflight(request, sources)


def test_an_entry_that_let_a_refused_job_through_is_dropped(slurm, cache_home, hpc_home, tmp_path):
    live = _live_texts()
    # Stale facts listing a partition the cluster no longer has: preflight lets the job through,
    # sbatch refuses it (one line, exit 2, nothing queued or recorded), and the entry goes.
    ghost = live["partition"].splitlines()[0].replace("PartitionName=debug", "PartitionName=ghost")
    nodes = live["node"].replace("Partitions=debug", "Partitions=debug,ghost")
    assert nodes != live["node"]
    slurm_facts.store(dict(live, partition=live["partition"] + ghost + "\n", node=nodes))
    _open_profile(tmp_path)
    (tmp_path / "job.yaml").write_text("name: ghost\nprofile: open\nlauncher: srun\ncommand: [hostname]\n"
                                       "monitor: {interval: 0}\nresources: {nodes: 1, tasks_per_node: 1}\n"
                                       "slurm: {partition: ghost}\n")
    env = dict(os.environ, XDG_CACHE_HOME=str(cache_home))
    before = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout
    proc = hl("submit", "job.yaml", "--backend", "slurm", cwd=str(tmp_path), env=env, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "sbatch" in proc.stderr, proc.stderr
    assert slurm_facts.load() is None
    assert json.loads(hl("list", "--all", "--json", cwd="/", env=env).stdout) == []
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout == before
    # The next submission asks the controller: preflight's own message, naming the field.
    proc = hl("submit", "job.yaml", "--backend", "slurm", cwd=str(tmp_path), env=env, check=False)
    assert proc.returncode == 2 and "slurm.partition: no such partition" in proc.stderr, proc.stderr
