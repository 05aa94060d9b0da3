"""The backend table (choice.py) finds backends by name, imports only the one asked for, and is the
one place names are compared; what a backend can do is declared on it (Backend.capabilities)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends import choice
from hpclaunch.launchers.backends.base import Backend, Capability, NodeFailureAware
from hlcli import hl, job_file, modules_loaded


@pytest.mark.parametrize("name", list(choice.BACKENDS))
def test_each_name_is_a_backend_of_that_name(name):
    cls = choice.backend_class(name)
    assert issubclass(cls, Backend) and cls.name == name
    # node-failure awareness is declared and its methods are there to use, never probed with hasattr
    assert (Capability.NODE_FAILURES in cls.capabilities) == issubclass(cls, NodeFailureAware)


def test_what_each_backend_declares():
    caps = {name: choice.backend_class(name).capabilities for name in choice.BACKENDS}
    assert caps["slurm"] == {Capability.JOB_FILES, Capability.DEPENDENCIES, Capability.NODE_FAILURES}
    assert caps["local"] == {Capability.JOB_FILES}
    assert caps["submitit"] == frozenset()   # callables only; submitit requeues its own jobs
    assert choice.names(Capability.JOB_FILES) == ("slurm", "local")


def test_an_unknown_name_is_one_line_naming_the_choices():
    with pytest.raises(HpclaunchError) as e:
        choice.get_backend("pbs")
    assert str(e.value) == "--backend pbs: unknown backend \u2014 use slurm or local"


def test_submitit_follows_its_jobs_but_takes_no_job_file(tmp_path, hpc_home):
    assert not choice.relayed("submitit") and choice.relayed(choice.REMOTE)
    with pytest.raises(HpclaunchError, match="^backend remote: its jobs are followed through the remote's own"):
        choice.backend_class(choice.REMOTE)
    job = job_file(tmp_path, "name: j\ncommand: [python, t.py]\n")
    proc = hl("submit", job, "--backend", "submitit", check=False, cwd=str(tmp_path))
    assert proc.returncode == 2 and proc.stderr == "--backend submitit: it runs no job files \u2014 use slurm or local\n"
    assert not os.path.exists(tmp_path / "runs")


def test_after_on_a_backend_without_dependencies_is_one_line(tmp_path, hpc_home):
    job = job_file(tmp_path, "name: j\ncommand: [python, t.py]\n")
    proc = hl("submit", job, "--backend", "local", "--after", "first", check=False, cwd=str(tmp_path))
    assert (proc.returncode, proc.stderr) == (
        2, "--after: the local backend runs no dependencies \u2014 submit with --backend slurm\n")
    assert not os.path.exists(tmp_path / "runs")


def test_the_slurm_backend_loads_nothing_of_the_local_one():
    code = "from hpclaunch.launchers.backends import choice; choice.backend_class('slurm')"
    watch = ("hpclaunch.launchers.backends.local", "hpclaunch.launchers.backends.local_gpus", "tempfile",
             "importlib.metadata")
    assert modules_loaded(code, watch) == []


PLUGIN = '''
from hpclaunch.launchers.backends.base import Backend, JobStatus, State


class EchoBackend(Backend):
    name = "echo"

    def cluster_name(self):
        return "echo-cluster"

    def prepare(self, plan):
        return plan

    def queue(self, request, *, cwd, new_id):
        return [(new_id(), 0)]

    def release(self, ref, request, *, cwd):
        pass

    def status(self, ref):
        return JobStatus(State.COMPLETED)

    def cancel(self, ref):
        pass
'''


def test_a_backend_another_package_installs_is_found_by_its_entry_point(tmp_path):
    """As TorchX finds schedulers: an entry point in the group hpclaunch.backends, loaded only when
    its name is asked for."""
    (tmp_path / "hl_echo.py").write_text(PLUGIN)
    info = tmp_path / "hl_echo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hl-echo\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[hpclaunch.backends]\necho = hl_echo:EchoBackend\n")
    code = ("from hpclaunch.launchers.backends import choice\n"
            "be = choice.job_backend('echo')\n"
            "print(be.name, be.cluster_name(), choice.names())\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "echo echo-cluster ('slurm', 'local', 'submitit', 'echo')"
    # a built-in name never reads the entry points
    assert modules_loaded("from hpclaunch.launchers.backends import choice; choice.backend_class('local')",
                          ["importlib.metadata"], env=env) == []
