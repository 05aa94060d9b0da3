#!/usr/bin/env python3
"""The local backend's GPU leases on a real GPU.

    python bench/gpu/local_gpus_gpu.py --out DIR [--seconds 6]

1. What the local backend takes for this machine's GPUs (launchers/backends/local_gpus.py), and
   whether the driver's /proc folder is there (gVisor has none: NVML's count then).
2. Two one-GPU torch jobs submitted together (launcher srun, the monitor at 0.5 s): each sees one
   CUDA device and names it in CUDA_VISIBLE_DEVICES = SLURM_JOB_GPUS; on a one-GPU machine the
   second waits PENDING (with its reason) while the first holds the GPU, with more they run side by
   side on different GPUs; both exit 0.
3. Each job's report has the GPU it leased, energy from the counter, attributed to rank 0.

Exit 0 when every check held. Where no GPU is, HPCLAUNCH_LOCAL_GPUS=0 declares one, the programs
sleep instead of multiplying, and the CUDA and report checks are skipped (how the tests run it).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

from gpu_checks import FAILED, check, hl, job_bench, job_report  # bench/gpu, beside this script

PROGRAM = '''
import os, sys, time
import torch
n = torch.cuda.device_count()
print(f"visible={os.environ.get('CUDA_VISIBLE_DEVICES')} job_gpus={os.environ.get('SLURM_JOB_GPUS')} "
      f"cuda_devices={n} start={time.time():.2f}", flush=True)
end = time.time() + float(sys.argv[1])
if n:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while time.time() < end:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
else:
    time.sleep(float(sys.argv[1]))
print(f"end={time.time():.2f}", flush=True)
'''


def seen(run_dir: str) -> dict:
    text = open(os.path.join(run_dir, "logs", "attempt0", "rank0.log")).read()
    return dict(f.split("=", 1) for line in text.splitlines() for f in line.split() if "=" in f)


def main(argv=None) -> int:
    a, gpu, work, env = job_bench(argv, __doc__, 6.0)
    if not gpu:
        env["HPCLAUNCH_LOCAL_GPUS"] = "0"
    from hpclaunch.launchers.backends.local_gpus import machine_gpus

    ids = machine_gpus(env)
    print(f"the machine's GPUs: {ids}; /proc/driver/nvidia/gpus: "
          f"{'there' if os.path.isdir('/proc/driver/nvidia/gpus') else 'missing'}", flush=True)
    if not check(bool(ids), "the local backend finds this machine's GPUs"):
        return 1
    with open(os.path.join(work, "box.yaml"), "w") as f:
        f.write("name: box\nextends: local\nnode: {cpus: 16, mem: 120G, gpus: 1, gpu_model: GPU, gpu_mem_gib: 80}\n"
                "gpu_request: gpus-per-node\nmonitor: {sources: [nvml, host]}\n")
    prog = os.path.join(work, "load.py")
    with open(prog, "w") as f:
        f.write(PROGRAM)
    jobs = []
    for name in ("first", "second"):
        with open(os.path.join(work, name + ".yaml"), "w") as f:
            f.write(f"name: {name}\nprofile: ./box.yaml\nlauncher: srun\n"
                    f"command: {json.dumps([sys.executable, prog, str(a.seconds)])}\n"
                    "resources: {nodes: 1, tasks_per_node: 1, gpus_per_node: 1, time: \"00:05:00\"}\n"
                    "monitor: {interval: 0.5}\n")
        r = hl("submit", name + ".yaml", "--backend", "local", "--json", cwd=work, env=env)
        if not check(r.returncode == 0, f"{name}: submit exit {r.returncode} {r.stderr[-800:]}"):
            return 1
        jobs.append(json.loads(r.stdout))
    pending_seen, finals = "", {}
    deadline = time.time() + 6 * a.seconds + 120
    while len(finals) < 2 and time.time() < deadline:
        for job in jobs:
            st = json.loads(hl("status", job["job_id"], "--json", cwd=work, env=env).stdout)
            if st["state"] == "PENDING" and st.get("reason"):
                pending_seen = pending_seen or f"{job['job_id']}: {st['reason']}"
            if st["state"] not in ("PENDING", "RUNNING"):
                finals[job["job_id"]] = st
        time.sleep(0.3)
    for job in jobs:
        st = finals.get(job["job_id"], {})
        check(st.get("state") == "COMPLETED", f"job {job['job_id']} COMPLETED ({st.get('state')})")
    got = [seen(j["run_dir"]) for j in jobs]
    for job, g in zip(jobs, got):
        print(f"   job {job['job_id']}: {g}", flush=True)
        check(g.get("visible") == g.get("job_gpus") and g.get("visible") in ids, f"job {job['job_id']}: one leased GPU named")
        if gpu:
            check(g.get("cuda_devices") == "1", f"job {job['job_id']}: torch sees one CUDA device")
    overlap = float(got[1]["start"]) < float(got[0]["end"]) and float(got[0]["start"]) < float(got[1]["end"])
    if len(ids) == 1:
        print(f"   while the first ran: {pending_seen or 'never PENDING'}", flush=True)
        check("waiting for 1 GPU(s)" in pending_seen, "the second job waited PENDING for the GPU")
        check(not overlap, "the two jobs did not run at once on the one GPU")
    else:
        check(got[0]["visible"] != got[1]["visible"] and overlap, "the two jobs ran at once on different GPUs")
    for job, g in zip(jobs, got):
        doc = job_report(job["run_dir"], f"job-{job['job_id']}", a.out, work, env)
        if doc is None or not gpu:
            continue
        gpus = doc.get("gpus", [])
        for row in gpus:
            print(f"   job {job['job_id']} GPU {row.get('index')}: {row.get('energy_j')} J ({row.get('energy_source')}), "
                  f"ranks {row.get('ranks')}", flush=True)
        check([str(r.get("index")) for r in gpus] == [g["visible"]], f"job {job['job_id']}: the report has its GPU only")
        check(all(r.get("energy_source") == "counter" and r.get("ranks") == [0] for r in gpus),
              f"job {job['job_id']}: energy from the counter, rank 0")
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{len(FAILED)} check(s) failed" + (": " + "; ".join(FAILED) if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
