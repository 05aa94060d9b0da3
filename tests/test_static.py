"""Names that do not exist fail here, not at run time: a merge dropped `last_lines` from an import
and `submit --wait` died with NameError at its first heartbeat, a minute into every long job."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["hpclaunch", "launchers", "monitors", "reports", "train_entry"]


def test_no_undefined_names():
    proc = subprocess.run([sys.executable, "-m", "pyflakes", *PACKAGES], cwd=ROOT, capture_output=True, text=True)
    fatal = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines()
             if "undefined name" in line or "syntax" in line.lower() or "No module named pyflakes" in line]
    assert not fatal, "\n".join(fatal)
