"""The one way tests run the `hpclaunch` command: a real subprocess, as a user runs it."""
import subprocess
import sys


def hl(*args, cwd=None, check=True, timeout=300, env=None) -> subprocess.CompletedProcess:
    """`python -m hpclaunch ARGS`; with check, a non-zero exit fails the test showing both streams."""
    proc = subprocess.run([sys.executable, "-m", "hpclaunch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check:
        assert proc.returncode == 0, f"hpclaunch {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def hl_out(*args, **kwargs) -> str:
    """hl(...).stdout, checked."""
    return hl(*args, **kwargs).stdout


def job_file(tmp_path, text, name="job.yaml") -> str:
    """A job file of ``text`` in ``tmp_path`` (as a user writes one): its path, for `hpclaunch submit`."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)
