"""The test cluster's health check (tests/cluster/slurm-up.sh -k) against the running cluster, with one of
its inputs faked at a time. Read-only: nothing here starts, stops or restarts the cluster.

Why it matters: a cluster whose mpi/pmix plugin cannot load libpmix.so (libpmix-dev missing) passed the
old check (controller up, nodes idle) and failed every `srun --mpi=pmix` step; and a cluster busy with
jobs (nodes `mix`) failed it, so the fixture tore a shared cluster down under running tests.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import importlib.util

# tests/ has no __init__.py and several conftest.py exist: load the fixture module by its path.
_spec = importlib.util.spec_from_file_location(
    "hpclaunch_cluster_fixture_health", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster", "fixture.py"))
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def running():
    """The running cluster's statedir; brought up by the fixture if nothing is running."""
    fx.cluster_available_or_skip()
    env = fx.ensure_cluster(nodes=2)
    return Path(env["SLURM_CONF"]).parent


def _check(statedir, path_prefix=None):
    env = dict(os.environ)
    env.pop("SLURM_CONF", None)
    if path_prefix:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    return subprocess.run(["bash", str(fx.UP), "-k", "-d", str(statedir)], env=env, capture_output=True,
                          text=True, timeout=60)


def _fake(tmp_path, name, script):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    real = shutil.which(name)
    (bindir / name).write_text(f"#!/bin/bash\n{script.replace('REAL', real)}\n")
    (bindir / name).chmod(0o755)
    return bindir


def test_the_running_cluster_is_healthy(running):
    res = _check(running)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "" and "MPI plugin pmix loads" in res.stderr


def test_without_the_pmix_plugin_it_is_unhealthy(running, tmp_path):
    # srun as on a machine whose Slurm has no usable mpi/pmix: the other plugins only.
    bindir = _fake(tmp_path, "srun", 'if [[ $1 == --mpi=list ]]; then printf "MPI plugin types are...\\n\\tnone\\n'
                                     '\\tpmi2\\n"; exit 0; fi; exec REAL "$@"')
    res = _check(running, bindir)
    assert res.returncode == 1, res.stderr
    assert "unhealthy: MPI plugin pmix: srun --mpi=list does not list pmix" in res.stderr


def test_a_slurmd_that_could_not_load_pmix_makes_it_unhealthy(running, tmp_path):
    # The same cluster seen through a statedir whose slurmd log has the plugin's load error.
    sd = tmp_path / "state"
    (sd / "log").mkdir(parents=True)
    (sd / "slurm.conf").symlink_to(running / "slurm.conf")
    (sd / "nodes").write_text((running / "nodes").read_text())
    (sd / "log" / "slurmd-c1.log").write_text(
        "[2025-01-01T00:00:00.000] error:  mpi/pmix_v4: init: (null) [0]: mpi_pmix.c:195: "
        "pmi/pmix: can not load PMIx library\n")
    res = _check(sd)
    assert res.returncode == 1, res.stderr
    assert "slurmd could not load the PMIx library" in res.stderr


def test_busy_nodes_are_healthy_and_down_ones_are_not(running, tmp_path):
    busy = _fake(tmp_path, "sinfo", 'if [[ $* == *"%N %t"* ]]; then printf "c1 mix\\nc2 alloc\\n"; exit 0; fi; '
                                    'exec REAL "$@"')
    res = _check(running, busy)
    assert res.returncode == 0, res.stderr
    down = _fake(tmp_path, "sinfo", 'if [[ $* == *"%N %t"* || $* == *"%N=%t"* ]]; then printf "c1 mix\\nc2 idle*\\n"; '
                                    'exit 0; fi; exec REAL "$@"')
    res = _check(running, down)
    assert res.returncode == 1 and "not all 2 nodes are up" in res.stderr, res.stderr
