#!/usr/bin/env python3
"""hpclaunch on a real NVIDIA GPU: the monitor's NVML paths, their cost, and whole jobs with reports.

    python bench/gpu/gpu_checks.py --out DIR          # about 4 minutes on one GPU

Run where a GPU is (the device machine; the rest of the project has none). It prints figures and
checks, and leaves in DIR what it saw:

1. The driver and GPUs, as NVML names them.
2. Three monitor daemons side by side at 1 Hz over a known load (gpu_load.py: idle, bf16 matrix
   products, idle): real NVML; real NVML through tests/monitors/record_nvml.py (its recording,
   DIR/nvml-recording.json, is what the fake replays in tests/monitors/recorded/); and host only.
   Per daemon: CPU per sample (its monitor_stats event) and the time from spawn to its first row.
   Then `hpclaunch report` of the real-NVML daemon's logs: energy from the counter, the power
   integral's disagreement with it (crosscheck_pct), temperatures, clocks, throttling, XIDs.
3. bench/monitor/bench_monitor.py in this interpreter (``--here``: a GPU machine may have no network
   for its peer venv), 1000 samples, no daemon rounds or start-ups: the per-sample cost of the real
   NVML path beside the fake's.
4. A local-backend job (launcher srun, one GPU) running gpu_load.py with the monitor at 0.5 s and
   its Prometheus exporter on: scraped while it runs; then its report in text, JSON and HTML.
5. A local-backend torchrun job of train_entry on the GPU (nccl, bf16): trains, checkpoints,
   reports energy per step.

Exit 0 when every check held; 1 with the failed checks listed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LOAD = os.path.join(HERE, "gpu_load.py")
RECORDER = os.path.join(REPO, "tests", "monitors", "record_nvml.py")
FAILED: list = []


def check(ok: bool, what: str) -> bool:
    print(f"   [{'ok' if ok else 'FAILED'}] {what}", flush=True)
    if not ok:
        FAILED.append(what)
    return ok


def hl(*args, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpclaunch", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout)


def has_gpu() -> bool:
    """Whether NVML answers with at least one device (the local backend's own count)."""
    from hpclaunch.launchers.backends.local_gpus import nvml_device_count

    return nvml_device_count() > 0


def job_bench(argv, doc: str, seconds: float):
    """The start of a bench that submits local jobs: its arguments (``--out``, ``--seconds``), whether
    a GPU answers, a scratch folder, and an environment with a registry of its own there and no
    Slurm or hpclaunch variables of the caller's."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=seconds)
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCLAUNCH_"))},
           "HPCLAUNCH_HOME": os.path.join(work, "home")}
    return a, has_gpu(), work, env


def job_report(run_dir: str, tag: str, out: str, cwd: str, env: dict):
    """`hpclaunch report --format json` of a job's run directory, kept as DIR/report-TAG.json: the
    document, or None (a failed check) when the report failed."""
    rep = hl("report", run_dir, "--format", "json", cwd=cwd, env=env)
    if not check(rep.returncode == 0, f"{tag}: report exit {rep.returncode} {rep.stderr[-300:]}"):
        return None
    with open(os.path.join(out, f"report-{tag}.json"), "w") as f:
        f.write(rep.stdout)
    return json.loads(rep.stdout)


def events(run_dir: str, host: str) -> list:
    path = os.path.join(run_dir, "monitor", f"{host}.events.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def first_row_time(path: str, deadline: float):
    """time_unix of the first data row of a monitor CSV (its header and schema lines skipped)."""
    while time.time() < deadline:
        if os.path.exists(path):
            for line in open(path):
                if line[:1].isdigit() and line.endswith("\n"):
                    return float(line.split(",", 1)[0])
        time.sleep(0.005)
    return None


def facts() -> dict:
    print("\n1. driver and GPUs", flush=True)
    import pynvml
    pynvml.nvmlInit()
    drv = pynvml.nvmlSystemGetDriverVersion()
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        gpus.append({"index": i, "name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
                     "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000})
    pynvml.nvmlShutdown()
    print(f"   driver {drv}; nvidia-ml-py {getattr(pynvml, '__version__', '?')}; {gpus}")
    return {"driver": drv, "gpus": gpus}


def daemons(out: str, seconds: float, load: list) -> None:
    print(f"\n2. three monitor daemons at 1 Hz for {seconds:g} s over idle/load/idle", flush=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "HPCLAUNCH_"))}
    kinds = {"real": {}, "recorded": {"HPCLAUNCH_MONITOR_FAKE_NVML": RECORDER,
                                      "HPCLAUNCH_NVML_RECORD": os.path.join(out, "nvml-recording.json")},
             "host-only": {}}
    procs = {}
    loadp = subprocess.Popen([sys.executable, LOAD, *load], stdout=subprocess.PIPE, text=True)
    for kind, extra in kinds.items():
        run_dir = os.path.join(out, f"daemon-{kind}")
        os.makedirs(run_dir, exist_ok=True)
        cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", "1", "--duration", str(seconds),
               "--run-dir", run_dir, "--host", "gpu"]
        if kind == "host-only":
            cmd.append("--no-nvml")
        t0 = time.time()
        p = subprocess.Popen(cmd, env={**base, **extra}, stderr=subprocess.PIPE, text=True)
        first = os.path.join(run_dir, "monitor", "gpu.host.csv" if kind == "host-only" else "gpu.gpu.csv")
        procs[kind] = (p, run_dir, t0, first_row_time(first, t0 + 20))
    for kind, (p, run_dir, t0, first) in procs.items():
        _, err = p.communicate(timeout=seconds + 60)
        check(p.returncode == 0, f"daemon {kind} exited {p.returncode} {err[-500:]}")
        stats = [e["detail"] for e in events(run_dir, "gpu") if e["kind"] == "monitor_stats"]
        st = stats[-1] if stats else {}
        spawn = f"{(first - t0) * 1e3:.0f} ms" if first else "no row"
        print(f"   {kind:9s} {st.get('cpu_s_per_sample', 0) * 1e3:7.3f} ms CPU/sample  "
              f"{st.get('core_pct')} % of a core  RSS {st.get('rss_mib')} MiB  samples {st.get('samples')}  "
              f"max work {st.get('max_work_s', 0) * 1e3:.1f} ms  spawn to first row {spawn}")
    load_out = loadp.communicate(timeout=120)[0]
    print("   load: " + " | ".join(load_out.strip().splitlines()))
    rec = os.path.join(out, "nvml-recording.json")
    if check(os.path.exists(rec), "the recorder wrote nvml-recording.json"):
        sc = json.load(open(rec))
        timing = sc["recorded"]["call_timing"]
        print("   NVML calls on this driver (mean / max wall, µs):")
        for name, t in sorted(timing.items(), key=lambda kv: -kv[1]["mean_us"] * kv[1]["calls"]):
            print(f"     {name:42s} {t['calls']:5d} calls  {t['mean_us']:9.1f}  {t['max_us']:9.1f}")
        print(f"   power samples spacing: {sc['recorded']['power_sample_spacing_us']}")
        for d in sc["devices"]:
            print(f"   device {d['uuid']}: unsupported {d['unsupported']}, unknown fields {d['unknown_fields']}, "
                  f"event types {d.get('event_types')}")
    evs = events(procs["real"][1], "gpu")
    for e in evs:
        if e["kind"] in ("source_unavailable", "source_available", "nvml_error", "error"):
            print(f"   event {e['kind']}: {json.dumps(e.get('detail'))[:300]}")
    report_of(procs["real"][1], "daemon-real", out)


def report_of(run_dir: str, label: str, out: str, html=True) -> dict:
    r = hl("report", run_dir, "--format", "json")
    if not check(r.returncode == 0, f"report {label} exit {r.returncode}: {r.stderr[-300:]}"):
        return {}
    doc = json.loads(r.stdout)
    with open(os.path.join(out, f"report-{label}.json"), "w") as f:
        f.write(r.stdout)
    text = hl("report", run_dir, "--format", "text")
    check(text.returncode == 0, f"text report {label}")
    print("\n".join("   | " + x for x in text.stdout.splitlines()))
    if html:
        h = hl("report", run_dir, "--format", "html", "-o", os.path.join(out, f"report-{label}.html"))
        check(h.returncode == 0, f"html report {label}: {h.stderr[-200:]}")
    for g in doc.get("gpus", []):
        check(g.get("energy_source") == "counter", f"{label}: GPU {g.get('index')} energy from the counter "
              f"({g.get('energy_source')})")
        cc = g.get("crosscheck_pct")
        check(cc is not None and abs(cc) < 5.0, f"{label}: power integral within 5 % of the counter ({cc} %)")
    check(bool(doc.get("gpus")), f"{label}: the report has GPUs")
    return doc


def jobs(out: str, work: str) -> None:
    import pynvml
    pynvml.nvmlInit()
    name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
    pynvml.nvmlShutdown()
    profile = write(os.path.join(work, "gpu-box.yaml"), f"""name: gpu-box
description: the device machine, one {name}
node: {{cpus: 16, mem: 120G, gpus: 1, gpu_model: "{name}", gpu_mem_gib: 80}}
gpu_request: gpus-per-node
defaults:
  resources: {{nodes: 1, tasks_per_node: 1, gpus_per_node: 1, cpus_per_task: 4, mem: 32G, time: "00:20:00"}}
training: {{backend: nccl, lr_scaling: none}}
monitor: {{sources: [nvml, host, rapl]}}
limits: {{max_nodes: 1}}
""")
    env = {**os.environ, "HPCLAUNCH_HOME": os.path.join(work, "home")}
    print("\n4. a local-backend job on the GPU, monitor at 0.5 s with its Prometheus exporter", flush=True)
    job = write(os.path.join(work, "load.yaml"), f"""name: gpu-load
profile: {profile}
launcher: srun
command: [{sys.executable}, {LOAD}, --idle, "5", --load, "30", --idle-after, "5"]
monitor: {{interval: 0.5, prometheus_port: 9400}}
""")
    v = hl("validate", job, cwd=work, env=env)
    check(v.returncode == 0, f"validate {v.stdout[-300:]} {v.stderr[-300:]}")
    p = subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", job, "--backend", "local", "--wait"],
                         cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scrapes = []
    deadline = time.time() + 120
    while p.poll() is None and time.time() < deadline:
        time.sleep(3)
        st = hl("status", "gpu-load", "--json", cwd=work, env=env)
        if st.returncode not in (0,) or not st.stdout.strip():
            continue
        run_dir = json.loads(st.stdout).get("run_dir")
        ports = [os.path.join(run_dir, "monitor", n) for n in os.listdir(os.path.join(run_dir, "monitor"))
                 if n.endswith(".prometheus.port")] if run_dir and os.path.isdir(os.path.join(run_dir, "monitor")) else []
        if ports:
            port = int(open(ports[0]).read().split()[0])
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                scrapes.append((time.time(), body))
            except OSError as e:
                print(f"   scrape failed: {e}")
    so, se = p.communicate(timeout=300)
    check(p.returncode == 0, f"gpu-load job exit {p.returncode}: {se[-800:]}")
    print("   " + se.strip().replace("\n", "\n   ")[-1500:])
    if check(bool(scrapes), f"scraped the exporter while the job ran ({len(scrapes)} scrapes)"):
        with open(os.path.join(out, "scrape-last.txt"), "w") as f:
            f.write(scrapes[-1][1])
        energy = []
        for t, body in scrapes:
            for line in body.splitlines():
                if line.startswith("hpclaunch_gpu_energy_joules_total{"):
                    energy.append((t, float(line.rsplit(" ", 1)[1])))
        check(len(energy) >= 2 and energy[-1][1] > energy[0][1],
              f"the GPU energy counter rises between scrapes ({energy[:1]} .. {energy[-1:]})")
        lines = [x for x in scrapes[-1][1].splitlines() if x.startswith("hpclaunch_gpu_")]
        print("   " + "\n   ".join(lines[:14]))
    st = json.loads(hl("status", "gpu-load", "--json", cwd=work, env=env).stdout)
    doc = report_of(st["run_dir"], "job-load", out)
    for g in doc.get("gpus", []):
        print(f"   GPU {g.get('index')}: {json.dumps({k: g.get(k) for k in ('energy_j', 'energy_source', 'crosscheck_pct', 'avg_power_w', 'max_power_w', 'max_power_trace_w', 'trace_interval_s', 'power_limit_w', 'max_temp_c', 'max_mem_temp_c', 'slowdown_temp_c', 'avg_util_pct', 'idle_energy_j', 'throttle_s', 'throttle_source', 'xids')})[:900]}")
    copy_run(st["run_dir"], out, "job-load")

    print("\n5. train_entry on the GPU through torchrun (nccl, bf16)", flush=True)
    job = write(os.path.join(work, "train.yaml"), f"""name: gpu-train
profile: {profile}
launcher: torchrun
command: [{sys.executable}, -m, hpclaunch.train_entry, --data, digits, --epochs, "20", --backend, nccl]
monitor: {{interval: 0.5}}
""")
    r = hl("submit", job, "--backend", "local", "--wait", cwd=work, env=env, timeout=600)
    check(r.returncode == 0, f"gpu-train job exit {r.returncode}: {r.stderr[-1500:]}")
    st = json.loads(hl("status", "gpu-train", "--json", cwd=work, env=env).stdout)
    logs = hl("logs", "gpu-train", "--tail", "8", cwd=work, env=env)
    print("   " + logs.stdout.strip().replace("\n", "\n   "))
    log0 = open(os.path.join(st["run_dir"], "logs", "attempt0", "rank0.log")).read()
    check("cuda" in log0.lower(), "rank 0 trained on cuda")
    doc = report_of(st["run_dir"], "job-train", out)
    print(f"   efficiency: {doc.get('efficiency')}")
    copy_run(st["run_dir"], out, "job-train")


def write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def copy_run(run_dir: str, out: str, label: str) -> None:
    """The run directory's logs (no checkpoints) as one archive for the record."""
    dest = os.path.join(out, f"run-{label}")
    shutil.make_archive(dest, "gztar", run_dir, ".")
    size = os.path.getsize(dest + ".tar.gz")
    if size > 12 * 2**20:
        os.unlink(dest + ".tar.gz")
        shutil.make_archive(dest, "gztar", os.path.join(run_dir), "monitor")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for recordings, reports and logs")
    ap.add_argument("--seconds", type=float, default=50.0, help="length of the side-by-side daemon run")
    ap.add_argument("--skip", default="", help="comma list of sections to skip (2,3,4,5)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    skip = set(a.skip.split(","))
    info = facts()
    with open(os.path.join(a.out, "gpus.json"), "w") as f:
        json.dump(info, f, indent=1)
    if "2" not in skip:
        idle = max(5.0, a.seconds / 5)
        daemons(a.out, a.seconds, ["--idle", str(idle), "--load", str(a.seconds - 2 * idle - 2),
                                   "--idle-after", str(idle)])
    if "3" not in skip:
        print("\n3. bench/monitor/bench_monitor.py --here (paths only)", flush=True)
        r = subprocess.run([sys.executable, os.path.join(REPO, "bench", "monitor", "bench_monitor.py"), "--here",
                            "--samples", "1000", "--run-s", "3", "--daemon-seconds", "0", "--startup-runs", "0"],
                           text=True, capture_output=True, timeout=300)
        print(r.stdout[-3500:], r.stderr[-1000:])
        check(r.returncode == 0, "bench_monitor --here")
    with tempfile.TemporaryDirectory() as work:
        if "4" not in skip:
            jobs(a.out, work)
    print(f"\n{len(FAILED)} check(s) failed" + (": " + "; ".join(FAILED) if FAILED else ""))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
