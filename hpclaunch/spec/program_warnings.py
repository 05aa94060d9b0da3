"""Warnings, not errors, about how a job's own program will see its ranks: said by `validate` and by
`submit` before anything runs.

Hugging Face Accelerate decides alone whether it is distributed, from the variables its own launcher
(or torchrun) sets: RANK, WORLD_SIZE, LOCAL_RANK; on CPU only with ACCELERATE_USE_CPU as well. Without
them each rank is a world of one: N independent trainings of the same model on the same data, which
all end 0, so the job is COMPLETED and nothing looks wrong (issue 45, item 8). hpclaunch cannot see
inside a program; what it can see cheaply is the command: a Python script (the first ``*.py``
argument, read up to MAX_SCRIPT bytes) that imports ``accelerate``, or the ``accelerate launch``
command itself, in a job of more than one rank. Not seen: a program that reaches Accelerate through
another module of its own, ``python -m pkg``, or a shell script in between.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional

MAX_SCRIPT = 1 << 20
IMPORTS_ACCELERATE = re.compile(rb"^[ \t]*(?:from[ \t]+accelerate(?:\.[\w.]+)?[ \t]+import\b|import[ \t]+accelerate\b)",
                                re.M)


def _script(command: List[str], folder: str) -> Optional[str]:
    """The path of the Python script the command runs, if it names one that exists here."""
    for arg in command[:4]:
        if isinstance(arg, str) and arg.endswith(".py"):
            path = arg if os.path.isabs(arg) else os.path.join(folder, arg)
            return path if os.path.isfile(path) else None
    return None


def _imports_accelerate(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return bool(IMPORTS_ACCELERATE.search(f.read(MAX_SCRIPT)))
    except OSError:
        return False


def program_warnings(doc: dict, submit_dir: str) -> List[str]:
    """Lines to print for a resolved job (job.yaml's document), its program looked up from
    ``submit_dir`` (or its workdir)."""
    res = doc.get("resources") or {}
    ranks = int(res.get("nodes") or 1) * int(res.get("tasks_per_node") or 1)
    command = [str(a) for a in doc.get("command") or []]
    launcher = doc.get("launcher")
    if ranks < 2 or not command or launcher not in ("srun", "torchrun"):
        return []
    folder = doc.get("workdir") or submit_dir
    launches = any(os.path.basename(a) == "accelerate" for a in command[:2]) and "launch" in command[:4]
    script = _script(command, folder)
    if not launches and not (script and _imports_accelerate(script)):
        return []
    what = "`accelerate launch`" if launches else f"{os.path.basename(script)} imports accelerate, which"
    env = doc.get("env") or {}
    cpu = not int(res.get("gpus_per_node") or 0)
    if launcher == "srun" or launches:
        why = ("under launcher: srun each rank starts its own `accelerate launch`, a world of its own" if launches else
               "reads RANK, WORLD_SIZE and LOCAL_RANK: launcher: srun sets none of them, so each rank")
        fix = "launcher: accelerate, or torchrun with the script itself (python train.py)" + (
            ', and env ACCELERATE_USE_CPU: "1" on these CPU nodes' if cpu and "ACCELERATE_USE_CPU" not in env else "")
        return [f"warning: command: {what} {why} runs alone as a world of 1: {ranks} independent trainings, "
                f"each ending 0, the job COMPLETED. Use {fix} (docs/launch-modes.md, \"Accelerate\")"]
    if cpu and "ACCELERATE_USE_CPU" not in env:
        return [f"warning: command: {what} ignores torchrun's world on CPU nodes unless ACCELERATE_USE_CPU is set: "
                f"each of the {ranks} ranks would train alone, each ending 0. Add env: {{ACCELERATE_USE_CPU: \"1\"}} "
                "(docs/launch-modes.md, \"Accelerate\")"]
    return []
