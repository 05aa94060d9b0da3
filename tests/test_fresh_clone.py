"""A fresh clone is the tracked files: every source file must be tracked, nothing generated may be.

`.gitignore` once said `runs/` (meant for ./runs, the run directories), which also ignored
hpclaunch/runs/: new modules there (functions.py, resubmit.py) existed on the machines that wrote
them and in no clone, so `import hpclaunch.runs.jobs` failed on a fresh machine.
"""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The folders setup.cfg installs (package_dir), plus what the Makefile, CI and the tests run.
SOURCE_DIRS = ["hpclaunch", "launchers", "monitors", "reports", "train_entry", "templates", "hpc_profiles",
               "tests", "examples", "bench", "docs", ".ci"]
GENERATED = ("__pycache__", ".pyc", ".egg-info", ".installed", ".apt-installed", ".venv/", ".pytest_cache")


def _git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def in_git():
    if _git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git checkout (an sdist or wheel): nothing to check")


def _source_dirs():
    for top in SOURCE_DIRS:
        for dirpath, dirnames, _ in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
            yield os.path.relpath(dirpath, ROOT)


def test_no_source_folder_is_ignored(in_git):
    probes = [os.path.join(d, "new_module.py") for d in _source_dirs()]
    res = subprocess.run(["git", "check-ignore", "--verbose", "--no-index", "--stdin"], cwd=ROOT, input="\n".join(probes),
                         capture_output=True, text=True, timeout=60)
    assert res.stdout == "", "a new file here would never reach a clone:\n" + res.stdout


def test_no_source_file_is_ignored(in_git):
    res = _git("ls-files", "--others", "--ignored", "--exclude-standard", "--", *SOURCE_DIRS)
    lost = [p for p in res.stdout.splitlines() if not any(g in p for g in GENERATED)]
    assert lost == [], "ignored by .gitignore, so missing from every clone: " + ", ".join(lost)


def test_nothing_generated_is_tracked(in_git):
    tracked = [p for p in _git("ls-files").stdout.splitlines() if any(g in p for g in GENERATED)]
    assert tracked == [], tracked
