"""A wheel built from a clean clone, installed into a new venv, renders every shipped profile x launcher."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROFILES = ["a100-hpc", "jetson-orin", "local", "testcluster", "workstation"]
LAUNCHERS = ["torchrun", "horovod", "mpi", "srun"]


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.skipif(not shutil.which("git"), reason="git is needed to clone")
def test_wheel_from_clean_clone(tmp_path):
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.fail("not a git checkout with commits: commit first, the wheel is built from a clean clone")
    clone = tmp_path / "clone"
    _run(["git", "clone", "-q", ROOT, str(clone)])
    # Build with the running interpreter's setuptools (no network-dependent build isolation).
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
          str(tmp_path / "dist"), str(clone)])
    wheels = list((tmp_path / "dist").glob("hpclaunch-*.whl"))
    assert len(wheels) == 1
    import zipfile
    names = zipfile.ZipFile(wheels[0]).namelist()
    for must in ["hpclaunch/cli/__init__.py", "hpclaunch/launchers/render.py", "hpclaunch/monitors/schema.py",
                 "hpclaunch/spec/job.py", "hpclaunch/runs/jobs.py", "hpclaunch/runs/functions.py",
                 "hpclaunch/launchers/backends/slurm.py", "hpclaunch/reports/document.py", "hpclaunch/common/atomic.py",
                 "hpclaunch/templates/job.sbatch.j2", "hpclaunch/templates/torchrun.j2",
                 "hpclaunch/hpc_profiles/a100-hpc.yaml", "hpclaunch/train_entry/__init__.py",
                 "hpclaunch/runtime/job.sh", "hpclaunch/runtime/__main__.py"]:
        assert must in names, f"{must} missing from the wheel"
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", str(wheels[0])])
    job = tmp_path / "elsewhere" / "job.yaml"
    job.parent.mkdir()
    job.write_text("name: wheel test\ncommand: [python, train.py]\nresources: {nodes: 1, tasks_per_node: 1}\n")
    hpclaunch = str(venv / "bin" / "hpclaunch")
    env = dict(os.environ, PYTHONPATH="")  # the source tree must not be on the path
    for profile in PROFILES:
        for launcher in LAUNCHERS:
            text = _run([hpclaunch, "render", str(job), "-o", f"profile={profile}", "-o", f"launcher={launcher}"],
                        cwd=str(job.parent), env=env)
            assert text.startswith("#!/bin/bash\n#SBATCH --job-name=wheel_test\n")
            script = tmp_path / "s.sbatch"
            script.write_text(text)
            _run(["bash", "-n", str(script)])
    # the job runtime the rendered scripts source: the wheel's own, found through its Python
    lib = _run([py, "-m", "hpclaunch.runtime", "--path"], cwd=str(job.parent), env=env).strip()
    assert lib.startswith(str(venv)) and os.path.isfile(lib), lib
    listing = _run([hpclaunch, "profiles"], cwd=str(job.parent), env=env)
    assert all(p in listing for p in PROFILES)
