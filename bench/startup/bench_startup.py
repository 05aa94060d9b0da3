"""Startup cost of the CLI, side by side with its floor and with TorchX, in one run.

Commands are run interleaved (A B C D, A B C D, ...) so machine noise hits all alike; the figure
of merit is the ratio of medians. Prints a Markdown table.

    python bench/startup/bench_startup.py [--runs 30] [--torchx PATH]

TorchX is looked up as `torchx` on PATH or in /tmp/hpclaunch-peers (created with
`python -m venv /tmp/hpclaunch-peers && /tmp/hpclaunch-peers/bin/pip install torchx` when --setup-peers).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

JOB = """name: bench
profile: testcluster
launcher: torchrun
command: [python, train.py]
resources: {nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:30:00"}
"""


def timeit(cmd, cwd, env):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed: {proc.stderr.decode()[-500:]}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--torchx", default=None)
    ap.add_argument("--setup-peers", action="store_true")
    args = ap.parse_args()
    py = sys.executable
    bindir = os.path.dirname(py)
    hpclaunch = os.path.join(bindir, "hpclaunch")
    torchx = args.torchx or shutil.which("torchx") or "/tmp/hpclaunch-peers/bin/torchx"
    if not os.path.exists(torchx) and args.setup_peers:
        subprocess.run([sys.executable, "-m", "venv", "/tmp/hpclaunch-peers"], check=True)
        subprocess.run(["/tmp/hpclaunch-peers/bin/pip", "install", "-q", "torchx"], check=True)
    # Installed wheels carry compiled bytecode (pip compiles at install); an editable install under
    # PYTHONDONTWRITEBYTECODE=1 would recompile every module on every start. Compare like with like.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env0 = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([py, "-m", "compileall", "-q"] + [os.path.join(root, d) for d in
                   ("hpclaunch", "launchers", "monitors", "templates", "hpc_profiles")], env=env0, check=False)
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "job.yaml"), "w") as f:
        f.write(JOB)
    env = dict(os.environ)
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "hpclaunch --help": [hpclaunch, "--help"],
        "floor: python -c 'import jinja2, yaml'": [py, "-c", "import jinja2, yaml"],
        "hpclaunch render job.yaml": [hpclaunch, "render", "job.yaml"],
        "hpclaunch validate job.yaml": [hpclaunch, "validate", "job.yaml"],
        "python -c 'import pydantic; from pydantic import BaseModel'": [py, "-c", "from pydantic import BaseModel"],
        "python -c 'import msgspec'": [py, "-c", "import msgspec"],
        "python -c 'import dataclasses'": [py, "-c", "import dataclasses"],
    }
    if os.path.exists(torchx):
        cases["torchx run --dryrun -s slurm dist.ddp -j 2x2"] = [
            torchx, "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "2x2", "--script", "train.py"]
    for name, cmd in list(cases.items()):  # warm the page cache and the template cache
        try:
            timeit(cmd, work, env)
        except SystemExit as e:  # an optional peer (pydantic, msgspec) not installed: leave it out
            print(f"skipping {name}: {str(e).splitlines()[-1]}", file=sys.stderr)
            del cases[name]
    times = {k: [] for k in cases}
    for _ in range(args.runs):
        for name, cmd in cases.items():
            times[name].append(timeit(cmd, work, env))
    med = {k: statistics.median(v) for k, v in times.items()}
    floor = med["floor: python -c 'import jinja2, yaml'"]
    bare = med["python -c pass"]
    print(f"| command | median ms | min ms | vs floor | vs `python -c pass` |")
    print("|---|---:|---:|---:|---:|")
    for name in cases:
        print(f"| `{name}` | {med[name] * 1e3:.1f} | {min(times[name]) * 1e3:.1f} | {med[name] / floor:.2f}x | "
              f"{med[name] / bare:.2f}x |")
    render = med["hpclaunch render job.yaml"]
    print()
    print(f"render / floor = {render / floor:.2f} (goal <= 1.30)")
    print(f"--help / python -c pass = {med['hpclaunch --help'] / bare:.2f} (goal <= 2.0)")
    tx = "torchx run --dryrun -s slurm dist.ddp -j 2x2"
    if tx in med:
        print(f"torchx dryrun / render = {med[tx] / render:.2f} (goal >= 2.5)")
    print(f"runs={args.runs} python={sys.version.split()[0]} cpus={os.cpu_count()}")


if __name__ == "__main__":
    main()
