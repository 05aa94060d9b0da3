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


def modules_loaded(code: str, watch, *, env=None, cwd=None, timeout=120) -> list:
    """Which of the ``watch`` modules a fresh Python has imported once ``code`` ran (a SystemExit
    of 0, as ``--help`` ends, counts as done): the start-up tests' one probe. Nothing is imported
    around ``code`` that a test could be asking about."""
    body = "".join("    " + line + "\n" for line in code.splitlines())
    probe = (f"import sys\ntry:\n{body}except SystemExit as e:\n    if e.code not in (0, None):\n        raise\n"
             f"print('LOADED=' + ','.join(m for m in {tuple(watch)!r} if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)
    assert proc.returncode == 0, f"{code}\n-> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    found = proc.stdout.rsplit("LOADED=", 1)[1].strip()
    return found.split(",") if found else []
