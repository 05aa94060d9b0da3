"""Fuzz (issue 15): generated and mutated job files, profiles and `-o` overrides through
load -> validate -> render, in-process. Zero tracebacks: every refusal is an HpclaunchError whose
every line is one printable problem naming its source, exit 2; every rendered script passes
`bash -n`, and a sample runs (launchers replaced by a pass-through) without any input value running.

A fixed number of cases (MIN_CASES, the same seeds every run), so a slow machine takes longer rather
than failing; HARD_S only stops a run whose cases became pathologically slow (a regression: ~7 ms a
case is normal, HARD_S allows ~24). Prints "fuzz: N cases, 0 tracebacks".
"""
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import time
import traceback

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hpclaunch import runtime
from hpclaunch.cli import main
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.render import render_job
from hpclaunch.spec.loading import resolve_job
from hpclaunch.spec.profiles import shipped_dir

FAKES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_CASES = 10_000
GENERATED = 1_000     # by hypothesis (10-30 ms each to draw), at most GENERATED_S; the rest mutations (~3 ms)
GENERATED_S = 25
HARD_S = 240         # fuzzing stops here even short of MIN_CASES (and the test fails); ~60-70 s is normal
BASH_CHECKS = 400     # rendered scripts checked with bash -n
EXECUTIONS = 25       # rendered scripts run with the launchers faked
CLI_EVERY = 40        # every 40th case through hpclaunch.cli.main (validate or render), the others direct
SECRET = "S3CR3T-C0NTENT"  # in a file that is not a profile: must never be printed

PAYLOADS = ["$(touch {c})", "`touch {c}`", "; touch {c}", "'; touch {c}; '", "\"; touch {c}; \"", "\ntouch {c}\n",
            "\rtouch {c}", "a\x00b", "${HOME}", "*", "~", "\\", "-e", "--", "\u00e9 \u6f22\u5b57 \U0001f680", " lead",
            "trail ", "{p}", "{q}", "{nope}", "%j", "#", "'", "\"", "\t", "x" * 300, "\u202e", "\x7f", ""]
NUMBERS = [0, 1, 2, -1, 3, 7, 1024, 65535, 65536, 2 ** 31, 2 ** 63, -2 ** 63 - 1, 10 ** 30, 0.5, -0.0, 1e-9, 1e308,
           float("nan"), float("inf"), float("-inf"), True, False, None]
KEYS = ["name", "command", "profile", "launcher", "resources.nodes", "resources.tasks_per_node", "resources.mem",
        "resources.time", "resources.gpus_per_node", "resources.cpus_per_task", "slurm.partition", "slurm.extra",
        "slurm.account", "env.A", "env.B_1", "env.HPCLAUNCH_X", "monitor.interval", "requeue.max_attempts",
        "requeue.grace", "requeue.signal", "rendezvous.port", "train.lr", "train.epochs", "train.seed", "workdir",
        "runs_root", "sweep", "sweep.method", "sweep.samples", "sweep.parameters", "sweep.parameters.p",
        "sweep.seed", "bogus", "resources", "env", "env.", ".", "a..b", "resources.nodes.x"]
SEEDS = [os.path.join(ROOT, "examples", "digits-ddp.yaml"), os.path.join(ROOT, "tests", "golden", "job.yaml")] + \
    [os.path.join(shipped_dir(), n) for n in sorted(os.listdir(shipped_dir())) if n.endswith(".yaml")]
SNIPPETS = ["&a [1, 2]", "*a", "&b {x: *b}", "<<: *a", "!!python/object/apply:os.system ['touch {c}']", "[[[[[[",
            "]]]", "{", "}", ": ", "- ", "? [a]\n", "!!binary aGk=", "!!set {a}", "!!timestamp 2001-01-01", ".nan",
            "-.inf", "9" * 5000, "0x" + "f" * 50, "1:2:3:4", "---\n", "...\n", "\t", "\x00", "\xff", "\n  ", "'",
            "\"\\u0000\"", "%YAML 1.1\n", "!<tag:x> 1", "&x", "*undefined", "~", "\ufeff", "\u2028", "#"]


class Run:
    def __init__(self, tmp):
        self.tmp, self.cases, self.refused, self.rendered = tmp, 0, 0, 0
        self.failures, self.scripts, self.executable, self.seeds = [], [], [], []
        self.canary = os.path.join(tmp, "CANARY")
        self.written = {}

    def case(self, files, command, overrides):
        """One case: write the files, run `hpclaunch COMMAND job.yaml -o ...` in-process, judge it."""
        for name, data in files.items():
            data = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
            if self.written.get(name) != data:  # writes cost more than a case's parsing
                with open(os.path.join(self.tmp, name), "wb") as f:
                    f.write(data)
                self.written[name] = data
        args = [command, "job.yaml"] + [a for o in overrides for a in ("-o", o)]
        self.cases += 1
        try:
            if self.cases % CLI_EVERY == 0:  # the command itself (its parser costs ~8 ms a call)
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(args)
                out, err = out.getvalue(), err.getvalue()
            else:  # what `render` does, without the parser: load, validate, render
                try:
                    code, out, err = 0, render_job(resolve_job("job.yaml", overrides)), ""
                except HpclaunchError as e:
                    code, out, err = e.exit_code, "", f"{e}\n"
                command = "render"
        except BaseException:  # noqa: BLE001 - a traceback is the defect this test looks for
            self.failures.append((files, args, traceback.format_exc()))
            return
        problem = self._judge(code, out, err)
        if problem:
            self.failures.append((files, args, problem))
        elif code == 0 and command == "render":
            self.rendered += 1
            self._keep(out, files)

    def _judge(self, code, out, err):
        if code == 0:
            # validate may warn (a '$' in an env value is exported literally): one line each, said as such
            stray = [line for line in err.splitlines() if not line.startswith("warning: ")]
            return None if not stray else f"exit 0 with stderr: {err!r}"
        if code != 2:
            return f"exit {code}: {err!r}"
        self.refused += 1
        lines = err.rstrip("\n").split("\n")
        if not err.strip():
            return "refused with an empty message"
        allowed = ("job.yaml", "site.yaml", "base.yaml", "secret.txt", "command line", "/dev/", "missing",
                   shipped_dir(), self.tmp)
        for line in lines:
            if not line.isprintable() or not line.startswith(allowed):
                return f"not a one-line problem naming its source: {line!r}"
        if SECRET in err:
            return f"echoed a file's content: {err!r}"
        return None

    def _keep(self, script, files):
        if len(self.scripts) < BASH_CHECKS:
            self.scripts.append(script)
        if len(self.executable) < EXECUTIONS and "hl_cmd=( " + json.dumps(sys.executable)[1:-1] in script.replace(
                "'", "") and "# --- site setup" not in script and "monitor: off" in script \
                and "\nhl_run_dir runs " in script and "\ncd -- " not in script:
            self.executable.append(script)


# --- generated cases (hypothesis) ---------------------------------------------------------------

def _strings(canary):
    return st.one_of(st.text(max_size=20), st.sampled_from([p.replace("{c}", canary) for p in PAYLOADS]),
                     st.sampled_from(["python", "train.py", "4G", "00:10:00", "debug", "--x=1", "local", "torchrun",
                                      "srun", "mpi", "horovod", "USR1", "runs", "gpu"]))


def _values(canary):
    scalars = st.one_of(_strings(canary), st.sampled_from(NUMBERS), st.integers(), st.floats())
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(_strings(canary), inner, max_size=4)),
                        max_leaves=6)


def _job(canary):
    value, text = _values(canary), _strings(canary)
    spec = st.one_of(st.lists(value, max_size=4), st.fixed_dictionaries({"range": st.lists(st.sampled_from(NUMBERS[:14]),
                                                                                            max_size=4)}),
                     st.fixed_dictionaries({"choice": st.lists(value, max_size=3)}),
                     st.fixed_dictionaries({st.sampled_from(["uniform", "loguniform"]): st.lists(
                         st.sampled_from(NUMBERS), min_size=2, max_size=2)}), value)
    sections = {
        "name": text, "command": st.one_of(st.lists(text, min_size=1, max_size=4).map(
            lambda a: [sys.executable, os.path.join(FAKES, "record.py")] + a), value),
        "profile": st.sampled_from(["local", "testcluster", "./site.yaml", "./secret.txt", "missing", "/dev/zero",
                                    "./job.yaml"]),
        "launcher": st.sampled_from(["torchrun", "srun", "mpi", "horovod", "x"]),
        "resources": st.dictionaries(st.sampled_from(["nodes", "tasks_per_node", "cpus_per_task", "gpus_per_node",
                                                      "mem", "time", "bogus"]), value, max_size=3),
        "env": st.dictionaries(st.one_of(text, st.sampled_from(["A", "B_1", "PATH", "API_TOKEN"])), value, max_size=3),
        "monitor": st.fixed_dictionaries({"interval": st.one_of(st.just(0), value)}),
        "slurm": st.dictionaries(st.sampled_from(["partition", "account", "extra", "exclusive"]), value, max_size=2),
        "train": st.dictionaries(st.sampled_from(["lr", "epochs", "seed", "precision", "global_batch"]), value,
                                 max_size=2),
        "sweep": st.fixed_dictionaries({"parameters": st.dictionaries(st.sampled_from(
            ["p", "q", "env.A", "train.lr", "train.epochs", "resources", "1x"]), spec, max_size=3)},
            optional={"method": st.sampled_from(["grid", "random", "x"]), "samples": value, "seed": value}),
        "workdir": value, "runs_root": st.one_of(st.just("runs"), value), "requeue": value, "rendezvous": value,
        "bogus": value,
    }
    return st.fixed_dictionaries({"name": sections["name"], "command": sections["command"],
                                  "monitor": st.just({"interval": 0})},
                                 optional={k: v for k, v in sections.items() if k not in ("name", "command", "monitor")})


def _profile(canary):
    value, text = _values(canary), _strings(canary)
    return st.fixed_dictionaries({"name": st.one_of(st.just("site"), text), "node": st.one_of(
        st.just({"cpus": 4}), st.dictionaries(st.sampled_from(["cpus", "mem", "gpus", "gpu_model"]), value))},
        optional={"extends": st.sampled_from(["local", "./base.yaml", "./site.yaml", "secret.txt"]),
                  "description": text, "setup": st.lists(text, max_size=2), "env": st.dictionaries(text, value, max_size=2),
                  "gres_name": text, "gpu_request": text, "network": value, "mpi": value, "horovod": value,
                  "runs_root": value, "defaults": value, "limits": value, "bogus": value})


def _dump(data):
    try:
        return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True,
                         sort_keys=False)
    except (yaml.YAMLError, ValueError):
        return "name: j\ncommand: [x]\n"


def _run_generated(run, deadline):
    canary = run.canary
    job = _job(canary)
    overrides = st.lists(st.tuples(st.sampled_from(KEYS), _strings(canary)).map(lambda kv: "=".join(kv)), max_size=2)

    bases = st.sampled_from(["name: base\nnode: {cpus: 2}\n", "name: base\nextends: ./site.yaml\nnode: {cpus: 2}\n",
                             f"name: base\nsetup: ['touch {canary}']\nnode: {{cpus: 2}}\n", "[base]\n", ""])

    # derandomize: CI runs the same cases every time (a found bug is a test to fix, not a flake);
    # the mutations below use a fixed seed too. HPCLAUNCH_FUZZ_RANDOM=1 explores new cases.
    @settings(max_examples=GENERATED, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), derandomize=not os.environ.get("HPCLAUNCH_FUZZ_RANDOM"))
    @given(case=job, profile=_profile(canary), base=bases, ov=overrides,
           command=st.sampled_from(["validate", "render"]))
    def one(case, profile, base, ov, command):
        if time.monotonic() > deadline:
            raise _Enough()
        files = {"job.yaml": _dump(case), "site.yaml": _dump(profile), "base.yaml": base,
                 "secret.txt": f"{SECRET}\n- {SECRET}\n{SECRET}: {SECRET}\n"}
        run.case(files, command, ov)
        if len(run.seeds) < 500:
            run.seeds.append(files["job.yaml"].encode("utf-8", "surrogatepass"))

    try:
        one()
    except _Enough:  # the time for generated cases is up
        pass


class _Enough(Exception):
    pass


# --- mutated cases ------------------------------------------------------------------------------

def _mutate(rng, text, canary):
    data = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(data))
        op = rng.randrange(6)
        if op == 0:
            data[pos:pos] = rng.choice(SNIPPETS).replace("{c}", canary).encode("utf-8", "surrogateescape")
        elif op == 1:
            data[pos:pos] = rng.choice(PAYLOADS).replace("{c}", canary).encode()
        elif op == 2 and data:
            del data[pos:pos + rng.randint(1, 40)]
        elif op == 3 and pos < len(data):
            data[pos] = rng.randrange(256)
        elif op == 4:
            lines = bytes(data).split(b"\n")
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            data = bytearray(b"\n".join(lines))
        else:
            data = data[:pos]
    return bytes(data).replace(b"\xff", b"\xff" if rng.random() < 0.3 else b"")


def _mutate_value(rng, text, canary):
    """A well-formed job with one value replaced: most of these get past YAML, many render."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if not isinstance(doc, dict) or not doc:
        return text
    node, key = doc, rng.choice(list(doc))
    while isinstance(node[key], (dict, list)) and node[key] and rng.random() < 0.7:
        node = node[key]
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
    payload = rng.choice(PAYLOADS).replace("{c}", canary)
    node[key] = rng.choice([payload, payload, payload, rng.choice(NUMBERS), [payload], rng.choice(SNIPPETS),
                            {"range": [0, rng.choice(NUMBERS[:8])]}])
    return yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), allow_unicode=True).encode(
        "utf-8", "surrogatepass")


def _run_mutated(run, deadline, target):
    rng = random.Random(15)
    seeds = []
    for path in SEEDS:
        with open(path, "rb") as f:
            seeds.append(f.read())
    job_seeds = [s for s in seeds if b"command:" in s] + [b"name: j\ncommand: [x, '{p}']\nprofile: ./site.yaml\n"
                                                          b"sweep: {parameters: {p: {range: [0, 4]}}}\n"] + run.seeds
    while run.cases < target and time.monotonic() < deadline:
        seed = rng.choice(job_seeds[:3] if rng.random() < 0.6 else job_seeds)  # the valid ones, or any
        job = _mutate_value(rng, seed, run.canary) if rng.random() < 0.4 else _mutate(rng, seed, run.canary)
        profile = _mutate(rng, rng.choice(seeds), run.canary) if rng.random() < 0.5 else rng.choice(seeds)
        if b"\nname:" not in b"\n" + job and rng.random() < 0.5:
            job = b"name: j\n" + job
        ov = [rng.choice(KEYS) + "=" + rng.choice(PAYLOADS + SNIPPETS).replace("{c}", run.canary)
              for _ in range(rng.randrange(3))]
        if rng.random() < 0.2:
            ov.append(rng.choice(["profile=./site.yaml", "profile=./secret.txt", "profile=/dev/zero"]))
        base = rng.choice(seeds) if rng.random() < 0.1 else run.written.get("base.yaml", seeds[0])
        run.case({"job.yaml": job, "site.yaml": profile, "base.yaml": base,
                  "secret.txt": f"{SECRET}: [{SECRET}]\n".encode()}, rng.choice(["validate", "render"]), ov)


# --- the test -----------------------------------------------------------------------------------

def _execute(tmp, script):
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    for tool in ("srun", "torchrun", "mpirun", "horovodrun", "scontrol"):
        link = os.path.join(bindir, tool)
        if not os.path.exists(link):
            os.symlink(os.path.join(FAKES, "passthrough" if tool != "scontrol" else "scontrol"), link)
    path = os.path.join(tmp, "job.sbatch")
    with open(path, "w", encoding="utf-8") as f:
        f.write(script)
    # HPCLAUNCH_PYTHON, HPCLAUNCH_RUNTIME: as hpclaunch's backends give them (submit_env)
    env = {"PATH": bindir + os.pathsep + os.environ["PATH"], "HL_RECORD": os.path.join(tmp, "record.json"),
           "HPCLAUNCH_PYTHON": sys.executable, "HPCLAUNCH_RUNTIME": runtime.path(), "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "c1", "SLURM_JOB_NUM_NODES": "1", "SLURM_SUBMIT_DIR": tmp,
           "HOME": tmp, "SLURM_ARRAY_JOB_ID": "42", "SLURM_ARRAY_TASK_ID": "0"}
    if "HPCLAUNCH_SWEEP_INDEX" not in script:
        del env["SLURM_ARRAY_JOB_ID"], env["SLURM_ARRAY_TASK_ID"]
    return subprocess.run(["bash", path], cwd=tmp, env=env, capture_output=True, timeout=60)


def test_fuzz_job_files_profiles_and_overrides(tmp_path, monkeypatch, capsys):
    tmp = str(tmp_path)
    monkeypatch.chdir(tmp)
    monkeypatch.setenv("HOME", tmp)
    monkeypatch.setenv("XDG_CONFIG_HOME", os.path.join(tmp, "config"))
    start = time.monotonic()
    deadline = start + HARD_S
    run = Run(tmp)
    _run_generated(run, min(deadline, start + GENERATED_S))
    generated = run.cases
    _run_mutated(run, deadline, MIN_CASES)
    fuzz_s = time.monotonic() - start
    bad_syntax = []
    for script in run.scripts:
        proc = subprocess.run(["bash", "-n"], input=script.encode("utf-8", "surrogateescape"), capture_output=True)
        if proc.returncode != 0:
            bad_syntax.append((proc.stderr.decode(errors="replace"), script[:2000]))
    ran = 0
    for script in run.executable:
        proc = _execute(tmp, script)
        assert b"hpclaunch: no job runtime" not in proc.stderr, proc.stderr   # it ran
        ran += 1
        assert not os.path.exists(run.canary), f"a value from the input ran:\n{script}"
    assert not os.path.exists(run.canary)
    with capsys.disabled():
        print(f"\nfuzz: {run.cases} cases, {len(run.failures)} tracebacks or malformed refusals "
              f"({generated} generated, {run.cases - generated} mutated; {run.refused} refused, {run.rendered} "
              f"rendered; bash -n on {len(run.scripts)}, {len(bad_syntax)} bad; {ran} scripts run, 0 values ran; "
              f"{fuzz_s:.0f} s fuzzing, {time.monotonic() - start:.0f} s in all)")
    if run.failures:
        files, args, why = run.failures[0]
        shown = {k: (v if isinstance(v, str) else v.decode("utf-8", "backslashreplace"))[:3000] for k, v in files.items()}
        raise AssertionError(f"{len(run.failures)} failures; the first: hpclaunch {args}\n{why}\nfiles: {shown}\nall: " + "\n".join(f"{a} -> {w}" for _, a, w in run.failures))
    assert not bad_syntax, bad_syntax[0]
    assert run.cases >= MIN_CASES, f"only {run.cases} cases in {HARD_S} s: cases became >3x slower"
