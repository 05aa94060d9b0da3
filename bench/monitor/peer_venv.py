"""The monitor bench's own venv: CodeCarbon (the peer) and this working tree's hpclaunch as a wheel.

Both are timed from one interpreter, installed the way users install them (a wheel, byte-compiled
by pip: an editable install pays for its import hook, and a tree without ``__pycache__`` compiles
every module at each start). The venv lives in ``~/.cache/hpclaunch/bench-venvs/monitor``
(``$HPCLAUNCH_BENCH_VENVS`` moves it). What it holds is checked by what it needs, never by a stamp:
CodeCarbon is installed when ``import codecarbon`` fails, and the wheel of the working tree is
rebuilt and reinstalled at every run, so the bench never times stale code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Optional, Tuple

import benchlib  # bench/, on sys.path through bench_monitor.py

VENVS = benchlib.VENVS
# import name -> pip name: the peer, and the NVML binding the daemons on the fake C library use
PEERS = {"codecarbon": "codecarbon", "pynvml": "nvidia-ml-py"}


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def ensure(name: str = "monitor") -> Tuple[Optional[str], list]:
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
            return None, [f"cannot create {venv}: {benchlib.last_line(p)}"]
    missing = [m for m in PEERS if _run([py, "-c", f"import {m}"], cwd="/").returncode != 0]
    peers = "CodeCarbon"
    if missing:
        print(f"bench venv {venv}: pip install {' '.join(missing)} (once; a minute or two)", flush=True)
        p = _run([py, "-m", "pip", "install", "-q", *(PEERS[m] for m in missing)])
        if p.returncode != 0:
            peers = "no peer"
            notes.append(f"pip could not install {' '.join(PEERS[m] for m in missing)} ({benchlib.last_line(p)}): "
                         "its sections are skipped")
    with tempfile.TemporaryDirectory() as out:
        wheel, why = benchlib.build_wheel(None, out)
        if wheel is None:
            return None, notes + [f"this tree's hpclaunch: {why}"]
        # --no-deps: the monitor needs only psutil (CodeCarbon brings it; the /proc path runs without).
        p = _run([py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel])
        if p.returncode != 0:
            return None, notes + [f"cannot install the hpclaunch wheel into {venv}: {benchlib.last_line(p)}"]
    notes.insert(0, f"venv {venv}: this tree's hpclaunch as a wheel, {peers}")
    return py, notes


def baseline(repo: str, ref: str, build: bool = True) -> Tuple[Optional[str], str]:
    """(directory to put on PYTHONPATH, note): hpclaunch as built from commit ``ref``, its wheel
    installed there (benchlib.wheel_site), for the bench to run the older daemon beside this tree's."""
    assert os.path.samefile(repo, benchlib.REPO), (repo, benchlib.REPO)
    site, note = benchlib.wheel_site(ref, build)
    return site, "baseline " + note
