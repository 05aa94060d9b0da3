"""Benches time hpclaunch as users install it: a wheel, not this venv's editable install
(bench/benchlib.py run_from_wheel; issue 20)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A bench script in miniature: it re-runs itself from the tree's wheel, then reports where hpclaunch
# and a process it starts with `python -m` (as torchrun starts ranks) import it from.
SCRIPT = f"""
import subprocess, sys
sys.path.insert(0, {os.path.join(ROOT, 'bench')!r})
import benchlib
benchlib.run_from_wheel()
import hpclaunch.monitors.daemon as d
child = subprocess.run([sys.executable, "-m", "hpclaunch.train_entry", "--help"], capture_output=True, text=True)
probe = subprocess.run([sys.executable, "-c", "import hpclaunch.train_entry as t; print(t.__file__)"],
                       capture_output=True, text=True)
print(d.__file__, benchlib.install_kind(), child.returncode, probe.stdout.strip())
"""


def _run(tmp_path, **env):
    script = tmp_path / "bench_mini.py"
    script.write_text(SCRIPT)
    # Run from the repository root: there `python -m` would find the tree's own hpclaunch/ folder first.
    return subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, HPCLAUNCH_BENCH_VENVS=str(tmp_path / "venvs"), **env))


def test_a_bench_reruns_itself_from_the_trees_wheel(tmp_path):
    assert "editable" in subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {os.path.join(ROOT, 'bench')!r}); import benchlib;"
         " print(benchlib.install_kind())"], capture_output=True, text=True, cwd="/").stdout  # the Makefile's venv
    p = _run(tmp_path)
    assert p.returncode == 0, p.stderr
    daemon, kind, rc, rank_file = p.stdout.split()
    site = str(tmp_path / "venvs" / "tree-site") + os.sep
    assert daemon.startswith(site) and rank_file.startswith(site), p.stdout
    assert kind == "wheel" and rc == "0"
    # The installed wheel is byte-compiled, as pip installs it for users.
    assert any(f.endswith(".pyc") for _, _, fs in os.walk(site + "hpclaunch/monitors") for f in fs)


def test_the_editable_install_is_kept_when_asked(tmp_path):
    p = _run(tmp_path, HPCLAUNCH_BENCH_EDITABLE="1")
    assert p.returncode == 0, p.stderr
    daemon, kind, _, _ = p.stdout.split()
    assert daemon == os.path.join(ROOT, "monitors", "daemon.py") and kind == "editable"
    assert not (tmp_path / "venvs").exists()


def test_a_section_on_a_wheel_built_at_another_commit_says_so(tmp_path, monkeypatch):
    """`run_all --only submit` reuses the wheel venv an earlier startup run built: its sections name
    the commit that wheel came from, not only the tree's."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import benchlib
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    monkeypatch.setattr(benchlib, "install_kind", lambda py: "wheel")
    monkeypatch.setattr(benchlib, "commit", lambda: "bbbbbbb")
    assert benchlib.context(str(python))["install"] == "wheel"  # no record: as before
    (tmp_path / "venv" / benchlib.WHEEL_SOURCE).write_text("aaaaaaa\n")
    assert benchlib.context(str(python))["install"] == "wheel built at aaaaaaa"
    monkeypatch.setattr(benchlib, "commit", lambda: "aaaaaaa")
    assert benchlib.context(str(python))["install"] == "wheel"
