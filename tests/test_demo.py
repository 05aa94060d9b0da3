"""`make demo` (README: "Set up and try it") runs, and every command it prints runs as printed: from
another folder, with nothing activated and no HPCLAUNCH_HOME set (the demo's hint `hpclaunch logs 1`
once failed twice over: hpclaunch was not on PATH, and the job was in the demo's private registry)."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def demo_output():
    if not shutil.which("make"):
        pytest.skip("no make")
    env = {k: v for k, v in os.environ.items() if k != "HPCLAUNCH_HOME"}
    env["OMP_NUM_THREADS"] = "1"
    res = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "demo", f"VENV={sys.prefix}"], env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout


def _bare_env(tmp_path):
    """A shell as a new user's: no venv on PATH, no HPCLAUNCH_HOME, an empty home."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}


def test_demo_trains_and_says_where_everything_went(demo_output):
    assert "epoch 19 step" in demo_output and "validation accuracy" in demo_output, demo_output
    assert "run directory" in demo_output and "registry" in demo_output


def test_every_printed_hint_runs_as_printed(demo_output, tmp_path):
    hints = demo_output.split("Look at it (these run as printed):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(hints) >= 3 and any(" logs " in h for h in hints), demo_output
    job_id = re.search(r"hpclaunch logs (\S+)", demo_output).group(1)
    for hint in hints:
        res = subprocess.run(["bash", "-c", hint.strip()], cwd=str(tmp_path), env=_bare_env(tmp_path),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, f"{hint}\n{res.stdout}\n{res.stderr}"
        if " logs " in hint:
            assert "==> rank 0" in res.stdout and "==> rank 1" in res.stdout, res.stdout
        if " status " in hint:
            assert "COMPLETED" in res.stdout and job_id in res.stdout, res.stdout
        if " list " in hint:
            assert "digits-ddp" in res.stdout, res.stdout


def test_the_activate_hint_puts_hpclaunch_on_path(demo_output, tmp_path):
    line = next(ln for ln in demo_output.splitlines() if ln.startswith("To type just"))
    setup = line.split(": ", 1)[1]
    job_id = re.search(r"hpclaunch logs (\S+)", demo_output).group(1)
    res = subprocess.run(["bash", "-c", f"{setup} && hpclaunch status {job_id}"], cwd=str(tmp_path),
                         env=_bare_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "COMPLETED" in res.stdout, res.stdout + res.stderr
