"""`hpclaunch init`: a commented starter job file, filled from a profile's defaults."""
from __future__ import annotations

import json

from hpclaunch.spec.profiles import load_profile


def _y(value: object) -> str:
    # JSON scalars are valid YAML flow scalars, and quote whatever needs quoting.
    return json.dumps(value, ensure_ascii=False)


TRAIN_ENTRY = '[python, -m, hpclaunch.train_entry, --data, digits.csv, --epochs, "5"]'

# Per launch mode: the launcher, what each rank (or Ray's driver) runs, and a note on how the
# program finds its peers. JAX and Lightning read Slurm's variables themselves: launcher srun.
MODES = {
    "torchrun": ("torchrun", TRAIN_ENTRY, "torchrun forks tasks_per_node ranks per node; they meet at the head node"),
    "horovod": ("horovod", "[python, train.py]", "horovodrun starts the ranks; hvd.init() finds them"),
    "mpi": ("mpi", "[python, train.py]", "mpirun or srun --mpi starts the ranks; MPI.COMM_WORLD spans them"),
    "srun": ("srun", "[python, train.py]", "srun starts tasks_per_node ranks per node; Slurm's PROCID variable is the rank"),
    "ray": ("ray", "[python, driver.py]",
            "a Ray head on the first node, a worker on each other node; this command is the driver, on the "
            "head node, with RAY_ADDRESS set (ray.init() joins). The job ends when the driver does"),
    "tensorflow": ("tensorflow", "[python, train.py]",
                   "srun starts one worker per rank, each with a TF_CONFIG naming every worker and its own index: "
                   "tf.distribute.MultiWorkerMirroredStrategy() needs no arguments"),
    "jax": ("srun", "[python, train.py]",
            "one process per node (tasks_per_node: 1); jax.distributed.initialize() with no arguments reads "
            "Slurm's variables"),
    "lightning": ("srun", "[python, train.py]",
                  "tasks_per_node = Trainer(devices=...), nodes = Trainer(num_nodes=...); Lightning's "
                  "SLURMEnvironment reads Slurm's variables"),
}


def starter_job(profile_ref: str, name: str, where: tuple[str, str] | None = None, mode: str = "") -> str:
    lp = load_profile(profile_ref, where=where)
    p = lp.profile
    d = p.defaults
    res = d.get("resources", {})
    slurm = d.get("slurm", {})
    part = slurm.get("partition") or (p.limits.partitions[0] if p.limits.partitions else None)
    tasks = res.get("tasks_per_node", max(p.node.gpus, 1))
    launcher, command, note = MODES[mode] if mode else (d.get("launcher", "torchrun"), TRAIN_ENTRY, "")
    if mode in ("ray", "jax"):
        tasks = 1  # one Ray node / one JAX process per node, with the node's devices
    note = "".join(f"\n# {line}" for line in _wrap(f"{mode}: {note}")) if note else ""
    return f"""\
# hpclaunch job file. Check it with `hpclaunch validate {name}.yaml`, see the script with
# `hpclaunch render {name}.yaml`, run it with `hpclaunch submit {name}.yaml`.
# Every key: `hpclaunch schema`. Any key can be overridden: -o resources.nodes=2
name: {_y(name)}
profile: {_y(profile_ref)}           # {p.description or p.name}
launcher: {_y(launcher)}         # torchrun | horovod | mpi | srun | ray | tensorflow{note}
# What each rank runs (a list: no shell parsing, every argument arrives as written).
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
