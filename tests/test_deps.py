"""`make deps` and `make venv` check what they install, every time; nothing rests on a stamp file.

A tracked stamp (.apt-installed) once told `make test` on a fresh clone that the Debian packages were
there when none were; .venv/.installed said the same of pip's. Marked `root`: `make test` (CI) runs
these, `make test-fast` leaves them out; without root they skip (in CI they fail: see require).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _make(*args, **kw):
    return subprocess.run(["make", "--no-print-directory", "-C", ROOT, *args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 900), **kw)


def _makefile_var(name):
    text = open(os.path.join(ROOT, "Makefile")).read()
    m = re.search(rf"^{name}\s*:?=\s*(.*)$", text, re.M)
    assert m, f"no {name} in the Makefile"
    return m.group(1).split()


def _installed(pkg):
    res = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
    return res.returncode == 0 and res.stdout.startswith("install ok installed")


@pytest.fixture
def debian_root(require):
    why = None
    if os.geteuid() != 0:
        why = "make deps installs Debian packages: needs root"
    elif not (shutil.which("dpkg-query") and shutil.which("apt-get") and shutil.which("make")):
        why = "needs dpkg-query, apt-get and make (Debian)"
    require(why, "tests/test_deps.py")


def test_make_deps_checks_each_package_and_uses_no_stamp():
    if not shutil.which("make"):
        pytest.skip("no make")
    plan = _make("-n", "deps").stdout
    assert "dpkg-query" in plan and "check-deps" in plan, plan
    assert "touch" not in plan and "stamp" not in plan.lower() and ".apt-installed" not in plan, plan
    for pkg in _makefile_var("APT_PACKAGES"):
        assert pkg in plan, pkg


@pytest.mark.root
def test_after_make_deps_every_listed_package_is_installed(debian_root):
    pkgs = _makefile_var("APT_PACKAGES")
    assert {"openmpi-bin", "libopenmpi-dev", "libpmix-dev", "cmake", "g++", "prometheus"} <= set(pkgs), pkgs
    res = _make("deps")
    assert res.returncode == 0, res.stdout + res.stderr
    missing = [p for p in pkgs if not _installed(p)]
    assert missing == [], f"make deps left these missing: {missing}\n{res.stdout}{res.stderr}"


@pytest.mark.root
def test_check_deps_names_a_missing_package(debian_root):
    res = _make("check-deps", "APT_PACKAGES=openmpi-bin hpclaunch-no-such-package")
    assert res.returncode != 0
    assert "missing Debian packages: hpclaunch-no-such-package" in res.stderr, res.stderr


# `make venv` against a fake venv whose python records what it is asked to do.
_FAKE_PY = """#!/bin/bash
echo "$*" >> "$(dirname "$0")/calls"
if [[ $1 == -c ]]; then [[ -e "$(dirname "$0")/imports-ok" ]]; exit; fi
exit 0
"""


def _fake_venv(tmp_path, imports_ok, stamp=True):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(_FAKE_PY)
    py.chmod(0o755)
    (venv / "bin" / "hpclaunch").write_text("#!/bin/sh\n")
    (venv / "bin" / "hpclaunch").chmod(0o755)
    if imports_ok:
        (venv / "bin" / "imports-ok").write_text("")
    dist = venv / "lib" / f"python3.{sys.version_info.minor}" / "site-packages" / "hpclaunch-0.1.dist-info"
    dist.mkdir(parents=True)
    future = time.time() + 3600   # installed after the last setup.cfg change
    os.utime(dist, (future, future))
    if stamp:   # what the old rule trusted
        (venv / ".installed").write_text("")
        os.utime(venv / ".installed", (future, future))
    return venv


def _pip_calls(venv):
    calls = (venv / "bin" / "calls").read_text() if (venv / "bin" / "calls").exists() else ""
    return [c for c in calls.splitlines() if c.startswith("-m pip install")]


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_make_venv_installs_when_the_packages_do_not_import(tmp_path):
    venv = _fake_venv(tmp_path, imports_ok=False)
    res = _make("venv", f"VENV={venv}")
    assert res.returncode == 0, res.stdout + res.stderr
    pips = _pip_calls(venv)
    assert any("-e .[train,mpi,report,test,frameworks,export,monitor,dashboard,alerts,tune,recovery]" in c for c in pips), pips
    assert any("torch==2.13.0" in c for c in pips), pips


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_make_venv_does_nothing_when_everything_is_there(tmp_path):
    venv = _fake_venv(tmp_path, imports_ok=True, stamp=False)
    res = _make("venv", f"VENV={venv}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert _pip_calls(venv) == [], res.stdout
    calls = (venv / "bin" / "calls").read_text()
    assert "import torch, hpclaunch, mpi4py, pyarrow, pytest" in calls, calls


@pytest.mark.skipif(not shutil.which("make"), reason="no make")
def test_make_venv_reinstalls_after_setup_cfg_changes(tmp_path):
    venv = _fake_venv(tmp_path, imports_ok=True, stamp=False)
    dist = next((venv / "lib").glob("python3*/site-packages/hpclaunch-*.dist-info"))
    past = os.stat(os.path.join(ROOT, "setup.cfg")).st_mtime - 60
    os.utime(dist, (past, past))
    res = _make("venv", f"VENV={venv}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert any("-e .[train,mpi,report,test,frameworks,export,monitor,dashboard,alerts,tune,recovery]" in c for c in _pip_calls(venv)), res.stdout
