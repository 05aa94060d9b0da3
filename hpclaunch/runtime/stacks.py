"""A hung rank's stacks, for the run directory (the node watch calls this on the supervisor's request).

One text file per rank: who it is (rank, host, pid, the process state and where the kernel has it
waiting), its Python stacks through py-spy where installed (``py-spy dump --nonblocking``: read from
the process's memory without stopping it, so a rank already stopped or deep in a collective is read
as it is; the ``[recovery]`` extra installs py-spy), else and also each thread's kernel stack
(/proc/PID/task/TID/stack, readable by root) and its wait channel, then the last lines of its log.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import List, Optional

from hpclaunch.common.atomic import write_atomic

PY_SPY_TIMEOUT_S = 20.0
LOG_LINES = 50
LOG_TAIL_BYTES = 64 * 1024


def py_spy() -> Optional[str]:
    """The py-spy program: on PATH, or beside this Python (a virtual environment's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


def _read(path: str, limit: int = 1 << 16) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError as e:
        return f"({e.strerror or e})"


def python_stacks(pid: int) -> str:
    tool = py_spy()
    if tool is None:
        return "(py-spy is not installed here: pip install 'hpclaunch[recovery]' for Python stacks)\n"
    try:
        p = subprocess.run([tool, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True,
                           timeout=PY_SPY_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"(py-spy did not answer within {PY_SPY_TIMEOUT_S:g} s)\n"
    except OSError as e:
        return f"(py-spy: {e})\n"
    text = p.stdout
    if p.returncode != 0:
        text += f"(py-spy exit code {p.returncode}: {p.stderr.strip()[-500:]})\n"
    return text


def kernel_stacks(pid: int) -> str:
    out: List[str] = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"(no /proc/{pid}: {e.strerror or e})\n"
    for tid in tids[:256]:
        base = f"/proc/{pid}/task/{tid}"
        comm = _read(f"{base}/comm").strip()
        wchan = _read(f"{base}/wchan").strip() or "-"
        out.append(f"--- thread {tid} ({comm}) waiting in {wchan}\n{_read(base + '/stack')}")
    return "".join(out)


def log_tail(path: str, lines: int = LOG_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            data = f.read()
    except OSError as e:
        return f"({e.strerror or e})\n"
    text = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(text) + ("\n" if text else "")


def dump_rank(pid: int, rank: str, host: str, out_path: str, log_path: str) -> None:
    status = {}
    for line in _read(f"/proc/{pid}/status").splitlines():
        key, _, value = line.partition(":")
        if key in ("Name", "State", "Threads", "VmRSS"):
            status[key] = value.strip()
    head = (f"rank {rank} on {host}, pid {pid}, at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n"
            + "".join(f"{k}: {v}\n" for k, v in status.items()))
    text = (head + "\n=== Python stacks (py-spy dump --nonblocking) ===\n" + python_stacks(pid)
            + "\n=== kernel stacks per thread (/proc/PID/task/TID/stack) ===\n" + kernel_stacks(pid)
            + f"\n=== the last {LOG_LINES} lines of its log ({log_path}) ===\n" + log_tail(log_path))
    try:
        write_atomic(out_path, text)
    except OSError as e:
        print(f"hpclaunch watch: cannot write {out_path}: {e}", file=sys.stderr, flush=True)
