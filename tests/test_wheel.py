"""A wheel built from a clean clone, installed into a new venv, renders every shipped profile x launcher;
and such an install runs a job and reports it from the repository root, where Python imports the
checkout's `hpclaunch/` folder rather than the installed package (issue 43 item 5)."""
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


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(a clean clone of this repository's HEAD, the wheel built from it)."""
    if not shutil.which("git"):
        pytest.skip("git is needed to clone")
    if subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.fail("not a git checkout with commits: commit first, the wheel is built from a clean clone")
    tmp = tmp_path_factory.mktemp("wheel")
    clone = tmp / "clone"
    _run(["git", "clone", "-q", ROOT, str(clone)])
    # Build with the running interpreter's setuptools (no network-dependent build isolation).
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
          str(tmp / "dist"), str(clone)])
    wheels = list((tmp / "dist").glob("hpclaunch-*.whl"))
    assert len(wheels) == 1
    return clone, wheels[0]


def test_wheel_from_clean_clone(built, tmp_path):
    wheels = [built[1]]
    import zipfile
    names = zipfile.ZipFile(wheels[0]).namelist()
    for must in ["hpclaunch/cli/__init__.py", "hpclaunch/launchers/render.py", "hpclaunch/monitors/schema.py",
                 "hpclaunch/spec/job.py", "hpclaunch/runs/jobs.py", "hpclaunch/runs/functions.py",
                 "hpclaunch/launchers/backends/slurm.py", "hpclaunch/reports/document.py", "hpclaunch/common/atomic.py",
                 "hpclaunch/templates/job.sbatch.j2", "hpclaunch/templates/torchrun.j2",
                 "hpclaunch/hpc_profiles/a100-hpc.yaml", "hpclaunch/train_entry/__init__.py",
                 "hpclaunch/launchers/templating.py", "hpclaunch/templates/_compiled/MANIFEST",
                 "hpclaunch/runtime/job.sh", "hpclaunch/runtime/frameworks.sh", "hpclaunch/runtime/recovery.sh", "hpclaunch/runtime/__main__.py"]:
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
    # The wheel renders from the templates compiled at build time (setup.py), and the same bytes as
    # Jinja compiling the sources of this checkout.
    loader = _run([py, "-c", "from hpclaunch.launchers import templating; print(type(templating.environment().loader).__name__)"],
                  cwd=str(job.parent), env=env)
    assert loader.strip() == "ModuleLoader"
    for launcher in LAUNCHERS:
        args = ["render", str(job), "-o", "profile=a100-hpc", "-o", f"launcher={launcher}"]
        from_source = _run([sys.executable, "-m", "hpclaunch", *args], cwd=str(job.parent))
        assert _run([hpclaunch, *args], cwd=str(job.parent), env=env) == from_source


def test_a_wheel_install_submits_and_reports_from_the_repository_root(built, tmp_path):
    """`pip install .` then the quick start inside the clone: Python imports the clone's `hpclaunch/`
    (the current folder comes first on sys.path for `python -m`, which starts the local runner, the
    monitor and the ranks' train_entry), which must find its mapped subpackages (launchers/,
    monitors/, train_entry/...) beside it. The wheel goes into a new venv without its dependencies,
    which come from this test's own environment (torch, numpy: too large to install per test)."""
    clone, wheel = built
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", "--no-deps", str(wheel)])
    shared = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    with open(os.path.join(site, "zz_shared.pth"), "w") as f:  # after the venv's own: its hpclaunch wins
        f.write("\n".join(shared) + "\n")
    (clone / "job.yaml").write_text(
        "name: from the root\nprofile: local\nlauncher: srun\n"  # torch's own torchrun script is not in this venv
        "command: [python, -m, hpclaunch.train_entry, --data, digits, --epochs, '1']\n"
        "resources: {nodes: 1, tasks_per_node: 2, cpus_per_task: 1, time: '00:10:00'}\n"
        "env: {OMP_NUM_THREADS: '1'}\nmonitor: {interval: 0.5}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HPCLAUNCH_HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    hpclaunch = str(venv / "bin" / "hpclaunch")
    # what Python sees from the root: the clone's package, whole (it renders from the sources)
    seen = _run([py, "-m", "hpclaunch", "--version"], cwd=str(clone), env=env)
    assert seen.startswith("hpclaunch ")
    where = _run([py, "-c", "import hpclaunch.launchers.backends.local_runner as m, hpclaunch.monitors as n; "
                            "print(m.__file__); print(n.__file__)"], cwd=str(clone), env=env).split()
    assert all(w.startswith(str(clone) + os.sep) for w in where), where
    proc = subprocess.run([hpclaunch, "submit", "job.yaml", "--backend", "local", "--wait"], cwd=str(clone), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "COMPLETED" in proc.stderr, proc.stderr
    report = _run([hpclaunch, "report", "from the root"], cwd=str(clone), env=env)
    assert "energy" in report.lower() and "from the root" in report, report
    monitor = clone / "runs"
    assert any(name.endswith(".host.csv") for _, _, files in os.walk(monitor) for name in files)
