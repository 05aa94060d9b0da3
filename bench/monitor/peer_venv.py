"""The monitor bench's own venv: CodeCarbon (the peer) and this working tree's hpclaunch as a wheel.

Both are timed from one interpreter, installed the way users install them (a wheel, byte-compiled
by pip: an editable install pays for its import hook, and a tree without ``__pycache__`` compiles
every module at each start). The venv lives in ``~/.cache/hpclaunch/bench-venvs/monitor``
(``$HPCLAUNCH_BENCH_VENVS`` moves it). What it holds is checked by what it needs, never by a stamp:
CodeCarbon is installed when ``import codecarbon`` fails, and the wheel of the working tree is
rebuilt and reinstalled at every run, so the bench never times stale code.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
from typing import Optional, Tuple

VENVS = os.environ.get("HPCLAUNCH_BENCH_VENVS") or os.path.expanduser("~/.cache/hpclaunch/bench-venvs")
PEERS = ("codecarbon",)


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _tail(p: subprocess.CompletedProcess) -> str:
    """The last line pip or venv printed: the one that says why."""
    lines = (p.stderr or p.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {p.returncode}"


def ensure(repo: str, name: str = "monitor") -> Tuple[Optional[str], list]:
    """(python of the venv, notes). None when no venv with hpclaunch could be made: the bench then
    runs in the current interpreter and says so. A peer that pip cannot install is a note."""
    venv = os.path.join(VENVS, name)
    py = os.path.join(venv, "bin", "python")
    notes = []
    if not os.path.exists(py):
        # The base interpreter, not this venv's: a venv made from a venv points at its base anyway.
        base = getattr(sys, "_base_executable", sys.executable)
        p = _run([base, "-m", "venv", venv])
        if p.returncode != 0:
            return None, [f"cannot create {venv}: {_tail(p)}"]
    missing = [m for m in PEERS if _run([py, "-c", f"import {m}"], cwd="/").returncode != 0]
    peers = "CodeCarbon"
    if missing:
        print(f"bench venv {venv}: pip install {' '.join(missing)} (once; a minute or two)", flush=True)
        p = _run([py, "-m", "pip", "install", "-q", *missing])
        if p.returncode != 0:
            peers = "no peer"
            notes.append(f"pip could not install {' '.join(missing)} ({_tail(p)}): its sections are skipped")
    with tempfile.TemporaryDirectory() as out:
        # The wheel is built by this interpreter's setuptools (no build isolation: nothing to download).
        p = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", out, repo])
        wheels = glob.glob(os.path.join(out, "hpclaunch-*.whl"))
        if p.returncode != 0 or not wheels:
            return None, notes + [f"cannot build the hpclaunch wheel: {_tail(p)}"]
        # --no-deps: the monitor needs only psutil (CodeCarbon brings it; the /proc path runs without).
        p = _run([py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheels[0]])
        if p.returncode != 0:
            return None, notes + [f"cannot install the hpclaunch wheel into {venv}: {_tail(p)}"]
    notes.insert(0, f"venv {venv}: this tree's hpclaunch as a wheel, {peers}")
    return py, notes


def baseline(repo: str, ref: str, build: bool = True) -> Tuple[Optional[str], str]:
    """(directory to put on PYTHONPATH, note): hpclaunch as built from commit ``ref`` of ``repo``,
    installed there from its wheel (byte-compiled, as pip installs), for the bench to run the older
    daemon beside this tree's. Kept per commit under the bench venvs; made when missing if
    ``build`` (the wheel is built by this interpreter's setuptools, as for this tree's)."""
    p = _run(["git", "-C", repo, "rev-parse", "--verify", "--quiet", ref + "^{commit}"])
    if p.returncode != 0:
        return None, f"baseline {ref!r}: no such commit in {repo}: skipped"
    sha = p.stdout.strip()
    site = os.path.join(VENVS, "baselines", sha[:12])
    note = f"baseline {ref} ({sha[:10]}): its wheel installed in {site}"
    if os.path.isfile(os.path.join(site, "hpclaunch", "monitors", "daemon.py")):
        return site, note
    if not build:
        return None, f"baseline {ref}: {site} is missing: skipped"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        tar = subprocess.run(["git", "-C", repo, "archive", sha], capture_output=True)
        x = subprocess.run(["tar", "-x", "-C", src], input=tar.stdout, capture_output=True)
        if tar.returncode != 0 or x.returncode != 0:
            return None, f"baseline {ref}: git archive failed: {(tar.stderr or x.stderr).decode()[-300:]}"
        p = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", tmp, src])
        wheels = glob.glob(os.path.join(tmp, "hpclaunch-*.whl"))
        if p.returncode != 0 or not wheels:
            return None, f"baseline {ref}: cannot build its wheel: {_tail(p)}"
        part = site + ".part"  # complete or absent: the check above looks for the finished tree
        subprocess.run(["rm", "-rf", part])
        p = _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", part, wheels[0]])
        if p.returncode != 0:
            return None, f"baseline {ref}: cannot install its wheel: {_tail(p)}"
        os.replace(part, site)
    return site, note
