#!/usr/bin/env python3
"""JAX and PyTorch Lightning on the GPU through the local backend, with the monitor on.

    python bench/gpu/frameworks_gpu.py --out DIR [--seconds 15]

Two programs that never heard of hpclaunch, each a local-backend job on one GPU (``launcher:
srun``): JAX (``jax.distributed.initialize()`` with no arguments, then bf16 matrix products) and
Lightning (its SLURMEnvironment, ``accelerator="auto"``). For each: the job's exit, the device the
program says it used, and the report: the GPU's energy from the counter, the power integral beside
it, the rank the GPU is attributed to. Exit 0 when every check held. Where no GPU is, the programs
run on the CPU and the report checks are skipped (how the tests run it).
"""
from __future__ import annotations

import json
import os
import shutil
import sys

from gpu_checks import FAILED, check, hl, job_bench, job_report  # bench/gpu/gpu_checks.py, beside this script

JAX_PROGRAM = '''
import os, socket, sys, time
import jax
jax.distributed.initialize()
import jax.numpy as jnp
seconds = float(sys.argv[1])
dev = jax.devices()[0]
size = 8192 if dev.platform == "gpu" else 256  # a CPU takes seconds for one product of 8192
x = jnp.ones((size, size), jnp.bfloat16)
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    x = (x @ x) * (1.0 / size)
    n += 1
x.block_until_ready()
print(f"jax process {jax.process_index()}/{jax.process_count()} on {dev.platform} {dev.device_kind} "
      f"host {socket.gethostname()}: {n} products", flush=True)
jax.distributed.shutdown()
'''

LIGHTNING_PROGRAM = '''
import socket, sys
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel
batches = int(sys.argv[1])
trainer = Trainer(devices=1, accelerator="auto", max_epochs=1, limit_train_batches=batches, limit_val_batches=0,
                  enable_checkpointing=False, logger=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(BoringModel())
print(f"lightning rank {trainer.global_rank}/{trainer.world_size} on {trainer.strategy.root_device} "
      f"host {socket.gethostname()}", flush=True)
del trainer
'''

def main(argv=None) -> int:
    a, gpu, work, env = job_bench(argv, __doc__, 15.0)
    with open(os.path.join(work, "box.yaml"), "w") as f:
        f.write("name: box\nextends: local\n" + (
            "node: {cpus: 16, mem: 120G, gpus: 1, gpu_model: GPU, gpu_mem_gib: 80}\ngpu_request: gpus-per-node\n"
            "monitor: {sources: [nvml, host, rapl]}\n" if gpu else ""))
    jobs = {"jax-gpu": (JAX_PROGRAM, [str(a.seconds)]),
            "lightning-gpu": (LIGHTNING_PROGRAM, ["3000" if gpu else "20"])}
    for name, (program, args) in jobs.items():
        print(f"\n{name}", flush=True)
        prog = os.path.join(work, name + ".py")
        with open(prog, "w") as f:
            f.write(program)
        gpus = "gpus_per_node: 1, " if gpu else ""
        with open(os.path.join(work, name + ".yaml"), "w") as f:
            f.write(f"name: {name}\nprofile: ./box.yaml\nlauncher: srun\n"
                    f"command: {json.dumps([sys.executable, prog, *args])}\n"
                    f"resources: {{nodes: 1, tasks_per_node: 1, {gpus}time: \"00:10:00\"}}\n"
                    "monitor: {interval: 0.5}\n")
        r = hl("submit", name + ".yaml", "--backend", "local", "--wait", cwd=work, env=env)
        logs = hl("logs", name, cwd=work, env=env).stdout
        print("   " + "\n   ".join(x for x in logs.splitlines() if x.startswith(("jax process", "lightning rank"))))
        if not check(r.returncode == 0, f"{name} exit {r.returncode}: {r.stderr[-1500:]} {logs[-1500:]}"):
            continue
        want = "on gpu" if gpu else "on cpu"
        check(want in logs.replace("cuda:0", "gpu"), f"{name}: the program ran {want}")
        st = json.loads(hl("status", name, "--json", cwd=work, env=env).stdout)
        doc = job_report(st["run_dir"], name, a.out, work, env)
        if doc is None or not gpu:
            continue
        for g in doc.get("gpus", []):
            print(f"   GPU {g.get('index')}: energy {g.get('energy_j')} J ({g.get('energy_source')}), "
                  f"avg {g.get('avg_power_w')} W, max {g.get('max_power_w')} W, crosscheck {g.get('crosscheck_pct')} %, "
                  f"ranks {g.get('ranks')}")
            check(g.get("energy_source") == "counter", f"{name}: energy from the counter")
            check(g.get("crosscheck_pct") is not None and abs(g["crosscheck_pct"]) < 5, f"{name}: power integral within 5 %")
            check(g.get("ranks") == [0], f"{name}: the GPU attributed to rank 0 ({g.get('ranks')})")
        check(bool(doc.get("gpus")), f"{name}: the report has the GPU")
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{len(FAILED)} check(s) failed" + (": " + "; ".join(FAILED) if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
