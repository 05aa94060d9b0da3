"""Calling Slurm's commands: a clean environment, bounded retries on transient controller errors,
and parsers for their output (scontrol's key=value records, squeue/sacct columns)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from typing import Iterable, Optional

from hpclaunch.common import envknobs
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.spec.units import parse_time_seconds

TRANSIENT = (
    "socket timed out", "unable to contact slurm controller", "connection refused",
    "resource temporarily unavailable", "zero bytes were transmitted", "slurm_persist_conn_open",
    "connection timed out", "temporarily unable to accept job", "slurmctld is not responding",
)
# Inherited from an enclosing allocation, these would silently change a new job (submitit#1782,
# goodfire-ai/spd#955). SLURM_CONF names the cluster and must stay.
_POISON_PREFIXES = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMI_", "PMIX_", "OMPI_COMM_WORLD_")
_KEEP = {"SLURM_CONF"}


def clean_env(base: Optional[dict] = None, extra: Optional[dict] = None) -> dict:
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name.startswith(_POISON_PREFIXES) and name not in _KEEP:
            del env[name]
    if extra:
        env.update(extra)
    return env


class SlurmError(HpclaunchError):
    def __init__(self, message: str, stderr: str = ""):
        super().__init__(message)
        self.stderr = stderr


def available() -> bool:
    return shutil.which("sbatch") is not None and shutil.which("squeue") is not None


def run(cmd: list[str], *, input: str | None = None, env: dict | None = None, retries: int | None = None,
        check: bool = True, timeout: float = 60, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run a Slurm command; retry transient controller errors with bounded exponential backoff."""
    if retries is None:
        retries = int(envknobs.number("HPCLAUNCH_SLURM_RETRIES", 4, 0, 20, integer=True))
    delay = envknobs.number("HPCLAUNCH_SLURM_RETRY_DELAY", 0.5, 0, 60)
    env = env if env is not None else clean_env()
    attempt = 0
    while True:
        said = None  # what a command stopped at the timeout had printed (Slurm's reason, if any)
        try:
            proc = subprocess.run(cmd, input=input, env=env, capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd or None)
        except FileNotFoundError:
            raise SlurmError(f"{cmd[0]}: command not found \u2014 run on a Slurm login node, "
                             "or use --backend local") from None
        except subprocess.TimeoutExpired as e:
            said = e.stderr or b""  # bytes: subprocess keeps a stopped command's output undecoded
            said = (said.decode(errors="replace") if isinstance(said, bytes) else said).strip()
            proc = subprocess.CompletedProcess(cmd, 124, "", f"{said}\n{cmd[0]} timed out after {timeout:.0f} s")
        if proc.returncode == 0 or not check:
            return proc
        message = (proc.stderr or proc.stdout).strip()
        if said is not None:  # not retried: a command retrying on its own (sbatch does) has had its time
            raise SlurmError(f"{' '.join(cmd[:2])} failed: {_timed_out(cmd[0], said, timeout)}", message)
        if attempt < retries and is_transient(message):
            time.sleep(delay * (2 ** attempt))
            attempt += 1
            continue
        raise SlurmError(f"{' '.join(cmd[:2])} failed: {first_line(message) or f'exit code {proc.returncode}'}"
                         f"{_hint(message, attempt)}", message)


def _timed_out(tool: str, said: str, timeout: float) -> str:
    """The line for a command stopped at its timeout: Slurm's last word, if it said one. sbatch keeps
    retrying while the controller refuses new jobs ("Slurm temporarily unable to accept job, sleeping
    and retrying": the queue is at its MaxJobCount, or the controller is busy)."""
    if not said:
        return f"{tool} did not answer in {timeout:.0f} s \u2014 check `scontrol ping` and SLURM_CONF, then try again"
    why = first_line(said)
    if is_transient(said):
        return (f"{why} (still so after {timeout:.0f} s: stopped) \u2014 the controller is not taking jobs now "
                "(its queue is full or it is busy); try again later")
    return f"{why} (then no answer in {timeout:.0f} s: stopped) \u2014 check `scontrol ping` and SLURM_CONF"


class Pending:
    """A Slurm query started now and read later, so that several run at once and overlap with
    the caller's own work. A failure is handed to run(), which retries it or reports it."""

    def __init__(self, cmd: list[str], env: dict | None = None) -> None:
        self.cmd = cmd
        self._env = env
        try:
            self._proc: Optional[subprocess.Popen] = subprocess.Popen(
                cmd, env=env if env is not None else clean_env(), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError:
            self._proc = None  # run() reports it
        self._result: Optional[subprocess.CompletedProcess] = None

    def result(self, check: bool = True) -> subprocess.CompletedProcess:
        if self._result is None:
            proc = None
            if self._proc is not None:
                try:
                    out, err = self._proc.communicate(timeout=60)
                    proc = subprocess.CompletedProcess(self.cmd, self._proc.returncode, out, err)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.communicate()
            if proc is None or (proc.returncode != 0 and (check or is_transient(proc.stderr + proc.stdout))):
                proc = run(self.cmd, env=self._env, check=check)
            self._result = proc
        return self._result


def is_transient(message: str) -> bool:
    low = message.lower()
    return any(t in low for t in TRANSIENT)


def _hint(message: str, attempts: int) -> str:
    if is_transient(message):
        return (f" \u2014 the controller did not answer after {attempts + 1} tries; check `scontrol ping` "
                "and SLURM_CONF, then try again")
    return " \u2014 see Slurm's message above"


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or [""])[0]


# A key starts a whitespace-separated word; its value runs to the next such ` Key=` and may hold
# spaces (OS=Linux 6.1 #1 SMP) and `=` (TRES=cpu=1,mem=100M,node=1, as scontrol prints it).
_KV = re.compile(r"(?:^|(?<=\s))([^\s=]+)=(.*?)(?=\s+[^\s=]+=|\s*$)")


def parse_records(text: str) -> list[dict[str, str]]:
    """scontrol -o output: one record a line, `Key=Value` pairs (values may contain spaces)."""
    out = []
    for line in text.splitlines():
        if "=" not in line:
            continue
        out.append({k: v.strip() for k, v in _KV.findall(line)})
    return out


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key = Value` lines."""
    conf = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            conf[key.strip()] = value.strip()
    return conf


def show(kind: str, name: str | None = None, pending: Optional[Pending] = None) -> list[dict[str, str]]:
    """`scontrol -o show KIND [NAME]` as records ([] when Slurm knows no such thing)."""
    proc = (pending or Pending(show_cmd(kind, name))).result(check=False)
    if proc.returncode != 0:
        return []
    return parse_records(proc.stdout)


def show_cmd(kind: str, name: str | None = None) -> list[str]:
    return ["scontrol", "-o", "show", kind] + ([name] if name else [])


def hostnames(nodelist: str) -> list[str]:
    return run(["scontrol", "show", "hostnames", nodelist]).stdout.split()


def parse_time_limit(text: str) -> Optional[int]:
    """Seconds in a partition/job time limit as scontrol prints it; None for UNLIMITED."""
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    try:
        return parse_time_seconds(text)
    except ValueError:
        return None


def columns(text: str, sep: str = "|") -> Iterable[list[str]]:
    for line in text.splitlines():
        if line.strip():
            yield line.split(sep)
