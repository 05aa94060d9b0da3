#!/usr/bin/env python3
"""CLI start-up on a wheel install, side by side with its floors, submitit, TorchX and an older
hpclaunch (by default the one before the architecture move, issue 12), all in one interleaved run.

    python bench/startup/bench_startup.py [--runs 30] [--old a653515] [--setup-peers] [--markdown PATH]

What it installs (nothing in the caller's environment changes):
- the work tree as it is (tracked and untracked files, not ignored ones) and ``--old`` (a commit;
  default a653515, the last commit before the move to layers), each built as a wheel and installed
  with its dependencies into its own venv under /tmp/hpclaunch-bench-startup/;
- with ``--setup-peers``, TorchX 0.7.0 in /tmp/hpclaunch-peers (left out when it cannot be had).

Every command runs from a scratch folder, interleaved (A B C ..., A B C ...) so machine noise hits
all alike; the figures of merit are ratios of medians, of wall time and of CPU time (user + system
of the process and its children, which another engineer's load on the shared machine inflates far
less). Each hpclaunch install has its own scratch XDG_CACHE_HOME (the help text and parsed job
files, common/usercache.py), made warm by one run of each command first, except for "render,
empty user cache", which gets an empty one every time (a job file never parsed before).
Goals (issue 43): --help <= 2.0x `python -c pass`; render <= 1.3x `python -c 'import jinja2, yaml'`;
validate and render >= 2x faster than TorchX's dry run of the same job shape.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

ROOT = benchlib.REPO
BASE = os.environ.get("HPCLAUNCH_BENCH_STARTUP_DIR") or "/tmp/hpclaunch-bench-startup"  # a private one: two benches at once
PEERS = "/tmp/hpclaunch-peers"
JOB = """name: bench
profile: testcluster
launcher: torchrun
command: [python, train.py]
resources: {nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:30:00"}
"""
# What a submitit user waits for before the first submit: the import and an executor with the same
# shape as the job above (AutoExecutor calls no Slurm command to be made).
SUBMITIT = ("import submitit, tempfile; e = submitit.AutoExecutor(folder=tempfile.mkdtemp()); "
            "e.update_parameters(nodes=2, tasks_per_node=2, cpus_per_task=1, timeout_min=30)")




def _run(cmd, **kw) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {(proc.stdout + proc.stderr)[-1500:]}")


def install(rev: str | None, label: str) -> str:
    """A fresh venv with the wheel of ``rev`` (the work tree when None) and its dependencies."""
    venv = os.path.join(BASE, label)
    if rev and os.path.exists(os.path.join(venv, "bin", "hpclaunch")):
        return venv  # a commit does not change: its venv from an earlier run is the same
    shutil.rmtree(venv, ignore_errors=True)
    print(f"installing {rev or 'the work tree'} as a wheel into {venv}", file=sys.stderr)
    _run([sys.executable, "-m", "venv", venv])
    _run([f"{venv}/bin/pip", "install", "-q", "--upgrade", "pip", "setuptools", "wheel"])
    with tempfile.TemporaryDirectory() as tmp:
        wheel, why = benchlib.build_wheel(rev, tmp)
        if wheel is None:
            raise SystemExit(f"{rev or 'the work tree'}: {why}")
        _run([f"{venv}/bin/pip", "install", "-q", wheel])
    with open(os.path.join(venv, benchlib.WHEEL_SOURCE), "w") as f:  # sections run on it say what it is
        f.write(rev or benchlib.commit())
    return venv


def torchx(setup: bool) -> str | None:
    exe = shutil.which("torchx") or f"{PEERS}/bin/torchx"
    if not os.path.exists(exe) and setup:
        print(f"installing TorchX 0.7.0 into {PEERS}", file=sys.stderr)
        try:
            _run([sys.executable, "-m", "venv", PEERS])
            _run([f"{PEERS}/bin/pip", "install", "-q", "torchx==0.7.0"])
        except SystemExit as e:
            print(f"TorchX left out: {str(e)[-300:]}", file=sys.stderr)
    return exe if os.path.exists(exe) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--old", default="a653515", help="commit to compare with (default: before the layers move)")
    ap.add_argument("--setup-peers", action="store_true", help="install TorchX if missing")
    ap.add_argument("--markdown", help="write this bench's section of docs/benchmarks.md here")
    args = ap.parse_args()
    os.makedirs(BASE, exist_ok=True)
    old_sha = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", args.old], capture_output=True,
                             text=True, check=True).stdout.strip()
    new, old = install(None, "new"), install(old_sha, f"old-{old_sha}")
    tx = torchx(args.setup_peers)
    work = tempfile.mkdtemp(prefix="hpclaunch-bench-")
    with open(os.path.join(work, "job.yaml"), "w") as f:
        f.write(JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    env["XDG_CACHE_HOME"] = os.path.join(work, "cache")
    hl, hl_old, py = f"{new}/bin/hpclaunch", f"{old}/bin/hpclaunch", f"{new}/bin/python"
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "floor: python -c 'import jinja2, yaml'": [py, "-c", "import jinja2, yaml"],
        "hpclaunch --help": [hl, "--help"],
        "hpclaunch validate job.yaml": [hl, "validate", "job.yaml"],
        "hpclaunch render job.yaml": [hl, "render", "job.yaml"],
        "hpclaunch render job.yaml, empty user cache": [hl, "render", "job.yaml"],
        f"{old_sha}: hpclaunch --help": [hl_old, "--help"],
        f"{old_sha}: hpclaunch validate job.yaml": [hl_old, "validate", "job.yaml"],
        f"{old_sha}: hpclaunch render job.yaml": [hl_old, "render", "job.yaml"],
        "submitit: import + AutoExecutor": [py, "-c", SUBMITIT],
    }
    tx_name = "torchx run --dryrun -s slurm dist.ddp -j 2x2"
    if tx:
        cases[tx_name] = [tx, "run", "--dryrun", "-s", "slurm", "dist.ddp", "-j", "2x2", "--script", "train.py"]
    section = benchlib.Section("CLI start-up (`bench/startup/bench_startup.py`)",
                               f"python bench/startup/bench_startup.py --runs {args.runs} --old {args.old}"
                               + (" --setup-peers" if args.setup_peers else ""), python=py)

    caches = {}  # one user cache per hpclaunch install: two versions never read each other's entries

    def env_for(name):
        if name.endswith("empty user cache"):
            return dict(env, XDG_CACHE_HOME=tempfile.mkdtemp(dir=work))
        install = name.split(":")[0] if name.startswith(f"{old_sha}:") else "new"
        return dict(env, XDG_CACHE_HOME=caches.setdefault(install, os.path.join(work, f"cache-{install}")))

    for name, cmd in cases.items():  # warm the page cache and the user caches
        benchlib.timeit(cmd, work, env_for(name))
    times = {k: [] for k in cases}
    cpu = {k: [] for k in cases}
    for _ in range(args.runs):
        for name, cmd in cases.items():
            wall, used = benchlib.timeit(cmd, work, env_for(name))
            times[name].append(wall)
            cpu[name].append(used)
    bare, floor = "python -c pass", "floor: python -c 'import jinja2, yaml'"
    rows = []
    for name, ts in times.items():
        s = benchlib.spread(ts)
        versus_old = ""
        if name.startswith("hpclaunch") and f"{old_sha}: {name}" in times:
            versus_old = f"{benchlib.ratio(ts, times[f'{old_sha}: {name}']):.2f}x"
        rows.append([f"`{name}`", f"{s['median'] * 1e3:.1f}", f"{s['min'] * 1e3:.1f}–{s['max'] * 1e3:.1f}",
                     f"{benchlib.spread(cpu[name])['median'] * 1e3:.1f}",
                     f"{benchlib.ratio(ts, times[bare]):.2f}x", f"{benchlib.ratio(ts, times[floor]):.2f}x",
                     f"{benchlib.ratio(cpu[name], cpu[floor]):.2f}x", versus_old])

    def both(a: str, b: str) -> tuple[float, float]:
        return benchlib.ratio(times[a], times[b]), benchlib.ratio(cpu[a], cpu[b])

    def goal(text: str, ratios: tuple[float, float], ok) -> str:
        met = "met" if all(ok(r) for r in ratios) else ("met in CPU time only" if ok(ratios[1]) else "NOT met")
        return f"- {text} = **{ratios[0]:.2f}** wall, **{ratios[1]:.2f}** CPU ({met})"

    render, validate = "hpclaunch render job.yaml", "hpclaunch validate job.yaml"
    section.para(f"hpclaunch installed as wheels (this tree's with its templates compiled at build time), each "
                 f"in its own venv with its own user cache; {args.runs} interleaved rounds from a scratch folder; "
                 f"the job is a 2-node x 2-rank torchrun job on the test cluster's profile, and TorchX's dry run "
                 f"the same shape (`dist.ddp -j 2x2`). `{old_sha}` is `--old`. The machine has 2 cores and is "
                 f"shared with other work: absolute times move, compare the ratios, wall and CPU (user + system "
                 f"of each command and its children, which others' load inflates far less).")
    section.table(["command", "median ms", "range ms", "CPU ms", "vs `python -c pass`", "vs floor",
                   "CPU vs floor", f"vs {old_sha}"], rows, "lrrrrrrr")
    lines = [goal("`--help` / `python -c pass`", both("hpclaunch --help", bare), lambda r: r <= 2.0) + ", goal <= 2.0",
             goal("render / floor", both(render, floor), lambda r: r <= 1.3) + ", goal <= 1.3",
             f"- submitit's import + executor / render = **{both('submitit: import + AutoExecutor', render)[0]:.2f}**"]
    if tx:
        lines.append(goal("TorchX dry run / validate", both(tx_name, validate), lambda r: r >= 2.0) + ", goal >= 2.0")
        lines.append(goal("TorchX dry run / render", both(tx_name, render), lambda r: r >= 2.0) + ", goal >= 2.0")
    else:
        lines.append("- TorchX: not installed (`--setup-peers` installs it), left out")
    lines.append(f"- load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    section.para("\n".join(lines))
    section.write(args.markdown)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
