#!/usr/bin/env python3
"""Submitting a 1,000-point sweep against Slurm's recorded answers: hpclaunch vs its floor, no cluster.

    python bench/submit/bench_submit_offline.py --python /tmp/venv-a/bin/python [--python B ...]
        [--points 1000] [--rounds 15] [--markdown docs/bench/submit_offline.md]

bench_submit.py times the same submission on the test cluster; this one needs none, for when the
cluster is busy (a CI run) or absent, and to compare installs side by side (a commit before a change
and after it: one venv each, ``--python`` once per venv, its `hpclaunch` script beside it).

Slurm's commands are stubs on PATH (bash scripts in a scratch folder): `scontrol show config` and
`scontrol -o show partition|node` print the test cluster's recorded answers (tests/fixtures/slurm),
`sbatch` swallows its script and prints a fresh job id, `scontrol release` and `scancel` succeed.
SLURM_CONF names a scratch file (the key of hpclaunch's cluster-facts cache). Each install gets its
own HPCLAUNCH_HOME (made first by `hpclaunch list`, as bench_submit.py does) and its own user cache;
one warm-up submission each fills the cache as a user's earlier submission would.

The floor is bench_submit.py's: a Python process that calls `sbatch` once for the same array, here the
stub. Every round runs the floor, then each install's `hpclaunch submit sweep.yaml --backend slurm
--json` (preflight on), in that order; the figures are medians over the rounds of wall time and of
CPU time (user + system of the process and its children, which others' load on a shared machine
inflates far less), and their ratios to the floor's. Goal (issue 43): submit <= 3x its floor.
A stub sbatch costs less than a real one (no controller round trip, no libslurm to load), so the
floor here is lower and the ratios higher than on a cluster: meeting the goal here meets it there.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from bench_submit import FLOOR_CHILD, sweep_job  # noqa: E402

FIXTURES = os.path.join(benchlib.REPO, "tests", "fixtures", "slurm")
STUBS = {
    "sbatch": """# read the script as sbatch does (cat: bash's own `read` takes a pipe one byte at a time, ~15 ms
# of CPU for a 1,000-point script), unless there is none (--wrap); print a fresh job id
case " $* " in *" --wrap "*) ;; *) cat > /dev/null ;; esac
t=${EPOCHREALTIME/./}
echo $(( 100000 + 10#${t: -8} % 90000000 ))
""",
    "scontrol": f"""case "$*" in
  "show config") exec cat {FIXTURES}/scontrol-show-config.txt ;;
  "-o show partition") exec cat {FIXTURES}/scontrol-show-partition.txt ;;
  "-o show node") exec cat {FIXTURES}/scontrol-show-node.txt ;;
  release*) exit 0 ;;
esac
echo "stub scontrol: unexpected $*" >&2; exit 97
""",
    "sacctmgr": f"exec cat {FIXTURES}/sacctmgr-assoc.txt\n",
    "scancel": "exit 0\n",
    "squeue": "exit 0\n",
}


def make_stubs(work: str) -> dict:
    """A scratch bin/ with the stubs and a scratch slurm.conf; the environment that uses them."""
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    for name, body in STUBS.items():
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            f.write("#!/bin/bash\n" + body)
        os.chmod(path, 0o755)
    conf = os.path.join(work, "slurm.conf")
    with open(conf, "w") as f:
        f.write("# a stub: hpclaunch keys its cluster-facts cache on this file\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE") and not k.startswith(("SLURM_", "SBATCH_"))}
    env.update(PATH=bindir + os.pathsep + env.get("PATH", ""), SLURM_CONF=conf)
    return env


# What dataclasses brings with it (inspect, and what inspect reads source and bytecode with).
DATACLASSES = ("dataclasses", "inspect", "ast", "_ast", "dis", "opcode", "_opcode", "tokenize", "token", "linecache")
THIRD_PARTY = ("jinja2", "markupsafe", "yaml", "_yaml")
_MODULES = """import atexit, json, runpy, sys
out, exe = sys.argv[1], sys.argv[2]
atexit.register(lambda: json.dump(sorted(sys.modules), open(out, "w")))
sys.argv = sys.argv[2:]
runpy.run_path(exe, run_name="__main__")
"""


def ladder(py: str, cmd: list, cwd: str, env: dict) -> dict:
    """Where a submission's CPU goes: {step: `python -c` importing what the step adds}, each step also
    importing everything before it. The modules are those one submission loaded (run once, through
    runpy, to list them); the last step is the submission itself (cases), whose rest is its work."""
    out = os.path.join(cwd, "modules.json")
    subprocess.run([py, "-c", _MODULES, out, *cmd], cwd=cwd, env=env, check=True, capture_output=True)
    with open(out) as f:
        loaded = [m for m in json.load(f) if m not in ("__main__", "runpy", "pkgutil")
                  and not m.startswith("_jinja2_module_templates")]  # Jinja's compiled templates: render's work
    ours = [m for m in loaded if m == "hpclaunch" or m.startswith("hpclaunch.")]
    third = [m for m in loaded if m.split(".")[0] in THIRD_PARTY]
    dc = [m for m in loaded if m in DATACLASSES]
    std = [m for m in loaded if m not in ours and m not in third and m not in dc]
    steps, acc = {}, []
    for name, mods in (("python -c pass", []),
                       ("+ " + ", ".join(sorted({m.split('.')[0] for m in third})) + " (and the standard library "
                        "they load)", third),
                       ("+ dataclasses (inspect, ast, dis, tokenize)", dc),
                       ("+ the rest of the standard library it loads", std),
                       (f"+ hpclaunch's {len(ours)} modules: a submission's imports", ours)):
        acc = acc + mods
        steps[name] = [py, "-c", f"import importlib\nfor m in {acc!r}:\n    try:\n        importlib.import_module(m)\n"
                                 "    except ImportError:\n        pass\n"]
    return steps




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", action="append", required=True,
                    help="a venv's python with hpclaunch installed (repeat to compare installs)")
    ap.add_argument("--label", action="append", help="a name per --python, in the same order")
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--parallelism", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the imports of the last --python's submission, step by step")
    ap.add_argument("--markdown", help="write this bench's section of docs/benchmarks.md here")
    args = ap.parse_args()
    labels = args.label or [benchlib.wheel_source(p) or p for p in args.python]
    if len(labels) != len(args.python):
        raise SystemExit("give one --label per --python")
    work = tempfile.mkdtemp(prefix="hpclaunch-bench-submit-offline-")
    env = make_stubs(work)
    with open(os.path.join(work, "sweep.yaml"), "w") as f:
        f.write(sweep_job(args.points, args.parallelism))
    floor_py = args.python[0]
    cases = {"floor": ([floor_py, "-c", FLOOR_CHILD, str(args.points), str(args.parallelism)], env)}
    for label, py in zip(labels, args.python):
        exe = os.path.join(os.path.dirname(py), "hpclaunch")
        home, cache = os.path.join(work, f"home-{len(cases)}"), os.path.join(work, f"cache-{len(cases)}")
        e = dict(env, HPCLAUNCH_HOME=home, XDG_CACHE_HOME=cache)
        subprocess.run([exe, "list"], env=e, cwd=work, check=True, capture_output=True)
        cases[label] = ([exe, "submit", "sweep.yaml", "--backend", "slurm", "--json"], e)
    # made now: its context (commit, load average "at the start") is of the start of the run
    installs = " ".join(f"--python {p} --label {shlex.quote(lab)}" for p, lab in zip(args.python, labels))
    section = benchlib.Section(f"Submitting a {args.points:,}-point sweep, Slurm's answers recorded "
                               "(`bench/submit/bench_submit_offline.py`)",
                               f"python bench/submit/bench_submit_offline.py {installs}"
                               + (" --breakdown" if args.breakdown else "")
                               + f" --points {args.points} --rounds {args.rounds}", python=args.python[-1])
    for cmd, e in cases.values():  # warm: the page cache, the bytecode, each user cache's cluster facts
        benchlib.timeit(cmd, work, e)
    steps = {}
    if args.breakdown:  # listed from a warm submission (its job file and cluster facts from the cache)
        label, py = labels[-1], args.python[-1]
        steps = {f"{label}: {k}": (v, env) for k, v in ladder(py, cases[label][0], work, cases[label][1]).items()}
        cases.update(steps)
        for cmd, e in steps.values():
            benchlib.timeit(cmd, work, e)
    wall = {k: [] for k in cases}
    cpu = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, (cmd, e) in cases.items():
            w, c = benchlib.timeit(cmd, work, e)
            wall[name].append(w)
            cpu[name].append(c)
            shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)  # run directories: not kept
    section.para(f"{args.rounds} interleaved rounds (floor, then each install) on a machine shared with other "
                 "work; Slurm's commands are stubs that print the test cluster's recorded answers, so no "
                 "controller is asked and the floor (Python + one stub `sbatch`) is lower than on a cluster. "
                 "Medians; CPU = user + system of the command and its children.")
    rows = []
    for name in [c for c in cases if c not in steps]:
        s = benchlib.spread(wall[name])
        rows.append([f"`{name}`", f"{s['median'] * 1e3:.1f}", f"{s['min'] * 1e3:.1f}–{s['max'] * 1e3:.1f}",
                     f"{benchlib.spread(cpu[name])['median'] * 1e3:.1f}",
                     f"{benchlib.ratio(wall[name], wall['floor']):.2f}x",
                     f"{benchlib.ratio(cpu[name], cpu['floor']):.2f}x"])
    section.table(["command", "median ms", "range ms", "CPU ms", "wall vs floor", "CPU vs floor"], rows)
    if steps:
        last = list(cases)[len(cases) - len(steps) - 1]  # the submission the steps break down
        med = {k: benchlib.spread(cpu[k])["median"] for k in list(steps) + [last]}
        order, before, brows = list(steps) + [last], 0.0, []
        work_row = "+ the work: load, plan, render, registry, run directory, 2 Slurm stubs"
        for k in order:
            what = k.split(": ", 1)[1] if k in steps else work_row
            brows.append([what, f"{med[k] * 1e3:.1f}", f"{(med[k] - before) * 1e3:+.1f}",
                          f"{(med[k] - before) / med[last] * 100:.0f} %"])
            before = med[k]
        section.para(f"Where `{last}`'s CPU goes: each step a `python -c` that imports what the step names and "
                     "every step before it (the modules one submission loaded), timed in the same rounds; the "
                     "last row is the submission itself. Medians; the steps' differences carry the noise of two "
                     "medians.")
        section.table(["step", "CPU ms", "added ms", "share"], brows)
    try:  # the cluster bench's section, above this one on the page: say which commit it timed
        with open(os.path.join(benchlib.REPO, "docs", "bench", "submit.json")) as f:
            cluster = json.load(f)
        section.para(f"The cluster bench's figures (the section above) are of {cluster['commit']} "
                     f"({cluster['date']}); this section's are of the installs named here.")
    except (OSError, ValueError, KeyError):
        pass
    lines = []
    for name in [c for c in list(cases)[1:] if c not in steps]:
        w, c = benchlib.ratio(wall[name], wall["floor"]), benchlib.ratio(cpu[name], cpu["floor"])
        met = "met" if w <= 3 and c <= 3 else ("met in CPU time only" if c <= 3 else "NOT met")
        lines.append(f"- `{name}` submit / floor = **{w:.2f}** wall, **{c:.2f}** CPU ({met}), goal <= 3")
    if steps:  # what no trimming of hpclaunch's own code can go under
        jinja = [k for k in steps if "jinja2" in k]
        if jinja:
            lines.append(f"- `python -c 'import jinja2'` alone (with what jinja2 loads) = "
                         f"**{benchlib.ratio(cpu[jinja[0]], cpu['floor']):.2f}** the floor's CPU")
    lines.append(f"- load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    section.para("\n".join(lines))
    section.write(args.markdown)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
