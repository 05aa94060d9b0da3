"""Every ```bash and ```python block of README.md runs, as a reader would run it: an example that breaks
fails the tests. Each block runs in a fresh folder holding what the README says it needs (the job file
shown above it as job.yaml, digits.csv, the .venv), with its own registry; blocks that submit get the
Slurm test cluster. Bash blocks run with `set -e`: every command must succeed.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
VENV_BIN = os.path.dirname(sys.executable)

# The only lines not run here, each with where it is run instead. A line matches on its command (the text
# before a `#` comment). Add to this only what cannot run inside a test, and say where it is exercised.
ELSEWHERE = {
    # installs this venv and runs the demo job: tests/test_demo.py runs `make demo` and each hint it prints
    "make demo": "tests/test_demo.py",
    # the test suite itself: CI (.ci/run) runs `make test` on a fresh machine
    "make test": ".ci/run (CI)",
    # installs into the current Python: `make venv` runs pip install -e
    # '.[train,mpi,report,test,frameworks,export,monitor,dashboard,alerts,tune]' (the extras together; tests/test_deps.py
    # checks when it does), tests/test_wheel.py installs the built wheel
    "pip install .": "make venv, tests/test_wheel.py",
    "pip install '.[train]'": "make venv",
    "pip install '.[report]'": "make venv",
    "pip install '.[mpi]'": "make venv",
    "pip install '.[export]'": "make venv",
    "pip install '.[monitor]'": "make venv",
    # needs a login node reachable by ssh with a profile naming it: tests/test_remote_cluster.py submits
    # with --remote to the test cluster's node c1 (real sshd), then runs status, logs and report through it
    "hpclaunch submit job.yaml --remote mycluster": "tests/test_remote_cluster.py",
    "pip install '.[dashboard]'": "make venv",
    "pip install '.[alerts]'": "make venv",
    "pip install '.[tune]'": "make venv",
    # a server that runs until Ctrl-C: tests/test_dashboard.py reads these lines from the README and runs
    # each as written (the first driven in headless Chromium, the second for its token), stops it with SIGINT
    "hpclaunch dashboard": "tests/test_dashboard.py",
    "hpclaunch dashboard --host 0.0.0.0 --port 8765": "tests/test_dashboard.py",
}


def blocks():
    """[(line number, language, code)] of the README's bash and python blocks."""
    out, lines, i = [], open(README, encoding="utf-8").read().split("\n"), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if m:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            if m.group(1) in ("bash", "python"):
                out.append((start, m.group(1), "\n".join(body) + "\n"))
        i += 1
    return out


def _command(line: str) -> str:
    return line.split("#", 1)[0].strip()


def _runnable(code: str) -> str:
    return "\n".join(line for line in code.split("\n") if _command(line) not in ELSEWHERE) + "\n"


def _needs_slurm(code: str) -> bool:
    return "submit" in code   # hpclaunch submit, hpclaunch.submit(, submit_function(


def _job_example() -> str:
    text = open(README, encoding="utf-8").read()
    return next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("name: digits-ddp"))


def _params():
    for line, lang, code in blocks():
        marks = [pytest.mark.cluster] if _needs_slurm(_runnable(code)) else []
        yield pytest.param(line, lang, code, id=f"README.md:{line}-{lang}", marks=marks)


@pytest.fixture(scope="session")
def digits_file(tmp_path_factory):
    from hpclaunch.train_entry.digits import write_digits_csv

    path = tmp_path_factory.mktemp("readme-data") / "digits.csv"
    write_digits_csv(str(path))
    return str(path)


def _folder(tmp_path, code, digits_file):
    """What the README says the block needs, in a fresh folder."""
    os.symlink(os.path.dirname(VENV_BIN), tmp_path / ".venv")   # `make demo` made it
    if "init job.yaml" not in code:
        (tmp_path / "job.yaml").write_text(_job_example())
    if "digits.csv" not in _runnable(code):
        os.symlink(digits_file, tmp_path / "digits.csv")


def _env(tmp_path, code):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "SLURM_JOB", "SLURM_STEP"))}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and os.path.abspath(p) != VENV_BIN]
    if "source .venv/bin/activate" not in code:   # the README says to, once per shell: as if done
        path.insert(0, VENV_BIN)
    env.update(PATH=os.pathsep.join(path), HPCLAUNCH_HOME=str(tmp_path / "registry"), OMP_NUM_THREADS="1")
    return env


def test_the_readme_has_blocks_and_the_allowlist_is_current():
    found = blocks()
    assert sum(lang == "bash" for _, lang, _ in found) >= 4 and any(lang == "python" for _, lang, _ in found)
    commands = {_command(line) for _, _, code in found for line in code.split("\n")}
    assert set(ELSEWHERE) <= commands, f"stale ELSEWHERE entries: {set(ELSEWHERE) - commands}"


@pytest.mark.parametrize("line,lang,code", list(_params()))
def test_readme_block_runs(line, lang, code, tmp_path, request, digits_file):
    runnable = _runnable(code)
    if not runnable.strip():
        pytest.skip(f"README.md:{line}: every line runs elsewhere: "
                    + "; ".join(f"{_command(c)} ({ELSEWHERE[_command(c)]})" for c in code.split("\n") if _command(c)))
    if _needs_slurm(runnable):
        request.getfixturevalue("slurm")   # the cluster, up (in CI it must be)
    _folder(tmp_path, runnable, digits_file)
    cmd = ["bash", "-e", "-o", "pipefail", "-c", runnable] if lang == "bash" else [sys.executable, "-c", runnable]
    res = subprocess.run(cmd, cwd=str(tmp_path), env=_env(tmp_path, runnable), capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, f"README.md:{line} ({lang}) failed, exit {res.returncode}:\n{runnable}\n" \
                                f"--- stdout ---\n{res.stdout[-4000:]}\n--- stderr ---\n{res.stderr[-4000:]}"
    if "submit_function(sum, [1, 2, 3]" in runnable:
        assert res.stdout.rstrip().split("\n")[-1] == "6", res.stdout


@pytest.mark.cluster
def test_submit_function_sum_is_6_on_the_cluster(slurm, tmp_path):
    code = "import hpclaunch\nassert hpclaunch.submit_function(sum, [1, 2, 3]).result() == 6\nprint('ok')\n"
    res = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=_env(tmp_path, code),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout == "ok\n", res.stdout + res.stderr
