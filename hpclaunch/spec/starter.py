"""`hpclaunch init`: a commented starter job file, filled from a profile's defaults."""
from __future__ import annotations

import json

from hpclaunch.launchers import modes
from hpclaunch.launchers.modes.torchrun import TRAIN_ENTRY
from hpclaunch.spec.profiles import load_profile


def _y(value: object) -> str:
    # JSON scalars are valid YAML flow scalars, and quote whatever needs quoting.
    return json.dumps(value, ensure_ascii=False)


def starter_job(profile_ref: str, name: str, where: tuple[str, str] | None = None, mode: str = "") -> str:
    lp = load_profile(profile_ref, where=where)
    p = lp.profile
    d = p.defaults
    res = d.get("resources", {})
    slurm = d.get("slurm", {})
    part = slurm.get("partition") or (p.limits.partitions[0] if p.limits.partitions else None)
    tasks = res.get("tasks_per_node", max(p.node.gpus, 1))
    # a mode: a launcher, or a recipe run by one (srun: jax, lightning), from the launcher registry
    launcher, command, note, per_node = modes.starters()[mode] if mode else (d.get("launcher", "torchrun"),
                                                                             TRAIN_ENTRY, "", None)
    if per_node is not None:
        tasks = per_node  # e.g. one Ray node / one JAX process per node, with the node's devices
    note = "".join(f"\n# {line}" for line in _wrap(f"{mode}: {note}")) if note else ""
    return f"""\
# hpclaunch job file. Check it with `hpclaunch validate {name}.yaml`, see the script with
# `hpclaunch render {name}.yaml`, run it with `hpclaunch submit {name}.yaml`.
# Every key: `hpclaunch schema`. Any key can be overridden: -o resources.nodes=2
name: {_y(name)}
profile: {_y(profile_ref)}           # {p.description or p.name}
launcher: {_y(launcher)}         # {" | ".join(modes.names())}{note}
# What each rank runs (a list: no shell parsing, every argument arrives as written). It runs in the
# folder you submit from: a program that resumes from a snapshot it finds there (snapshot.pt,
# checkpoints/) resumes the previous job's, even a finished one. Keep them per job: under
# $HPCLAUNCH_RUN_DIR (each job's own folder; it stays the same across requeues), e.g. an argument
# the program reads, or cd there in a wrapper (docs/requeue.md).
command: {command}

resources:
  nodes: {_y(res.get("nodes", 1))}
  tasks_per_node: {_y(tasks)}        # ranks per node (one per GPU on GPU nodes)
  gpus_per_node: {_y(res.get("gpus_per_node", p.node.gpus))}         # a node of this profile has {p.node.gpus}
  cpus_per_task: {_y(res.get("cpus_per_task", 1))}
  mem: {_y(res.get("mem", p.node.mem))}              # per node
  time: {_y(res.get("time", "00:30:00"))}     # MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS

slurm:
  partition: {_y(part)}
  account: null
  qos: null
  exclusive: false
  extra: []              # more sbatch long options, e.g. ["--constraint=a100"]

env:                     # exported to every rank
  OMP_NUM_THREADS: {_y(str(res.get("cpus_per_task", 1)))}

monitor:
  interval: 1.0          # seconds between power/thermal samples; 0 turns the monitor off
  # prometheus_port: 9400  # also serve the readings to Prometheus on each node (docs/monitor-logs.md)

requeue:
  max_attempts: 3        # attempts in all; 1 turns requeue off
  signal: USR2           # sent to the batch shell `grace` seconds before the time limit (docs/requeue.md)
  grace: null            # seconds; null: 120, and no signal for a time limit of 3 minutes or less
"""


def _wrap(text: str, width: int = 96) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line] if line else lines
