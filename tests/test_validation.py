"""Every class of bad input: one line per problem, naming file, field path, value and fix; exit 2."""

import pytest
from hlcli import hl

GOOD = "name: j\ncommand: [python, train.py]\n"


def _problems(run_cli, write, text, *overrides):
    path = write("job.yaml", text)
    args = ["validate", path]
    for o in overrides:
        args += ["-o", o]
    code, out, err = run_cli(*args)
    return code, err.strip().splitlines(), path


def test_valid(run_cli, write):
    code, lines, path = _problems(run_cli, write, GOOD)
    assert code == 0 and lines == []


@pytest.mark.parametrize("text,path,words", [
    (GOOD + "resources: {nodse: 2}\n", "resources.nodse", "did you mean 'nodes'"),
    (GOOD + "lancher: mpi\n", "lancher", "did you mean 'launcher'"),
    (GOOD + "resources: {nodes: two}\n", "resources.nodes", "expected an integer, got a string ('two')"),
    (GOOD + "resources: {nodes: true}\n", "resources.nodes", "expected an integer, got a boolean"),
    (GOOD + "monitor: {interval: fast}\n", "monitor.interval", "expected a number"),
    (GOOD + "resources: {time: '1:2:3:4'}\n", "resources.time", "is not a Slurm time"),
    (GOOD + "resources: {time: '00:61:00'}\n", "resources.time", "is not a Slurm time"),
    (GOOD + "resources: {mem: 4GB}\n", "resources.mem", "is not a Slurm memory size ('4GB')"),
    (GOOD + "resources: {tasks_per_node: 3}\n", "resources.tasks_per_node", "has 2"),
    (GOOD + "resources: {gpus_per_node: 1}\n", "resources.gpus_per_node", "has 0 GPUs"),
    (GOOD + "resources: {mem: 64G}\n", "resources.mem", "has 20G"),
    (GOOD + "resources: {nodes: 2}\n", "resources.nodes", "at most 1 nodes"),
    (GOOD + "resources: {time: '2-00:00:00'}\n", "resources.time", "at most 1-00:00:00"),
    (GOOD + "launcher: horovod\nresources: {tasks_per_node: 0}\n", "resources.tasks_per_node",
     "horovod needs at least one rank per node"),
    (GOOD + "launcher: horovd\n", "launcher", "did you mean 'horovod'"),
    (GOOD + "requeue: {signal: KILL}\n", "requeue.signal", "use USR1 or USR2"),
    (GOOD + "requeue: {grace: 7200}\n", "requeue.grace", "before the job starts"),
    (GOOD + "slurm: {extra: ['--wait; rm -rf /']}\n", "slurm.extra[0]", "one sbatch long option"),
    (GOOD + "slurm: {extra: ['--nodes=3']}\n", "slurm.extra[0]", "set resources.nodes instead"),
    (GOOD + "slurm: {partition: 'a b'}\n", "slurm.partition", "not a valid partition name"),
    (GOOD + "env: {API_TOKEN: abc}\n", "env.API_TOKEN", "looks like a secret"),
    (GOOD + "env: {'1X': a}\n", "env.1X", "not a valid environment variable name"),
    (GOOD + "env: {A: [1, 2]}\n", "env.A", "expected a string, got a list"),
    (GOOD + "train: {epochs: 5000}\n", "train.epochs", "at most 1000 epochs"),
    (GOOD + "train: {zero: 4}\n", "train.zero", "choose one of: 0, 1, 2, 3"),
    (GOOD + "train: {zero: 3, offload: optimizer}\n", "train.offload", "PyTorch offers no optimizer-only offload"),
    (GOOD + "train: {zero: 1, offload: params}\n", "train.offload", "set zero: 2 or 3"),
    (GOOD + "train: {model: 'os; rm'}\n", "train.model", "is not mlp, transformer or module:factory"),
    (GOOD + "train: {model: transformer, model_size: huge}\n", "train.model_size", "choose one of"),
    ("name: j\n", "command", "is required"),
    ("name: j\ncommand: python train.py\n", "command", "expected a list"),
    ("name: j\ncommand: []\n", "command", "is empty"),
    (GOOD + "runs_root: 'my runs'\n", "runs_root", "not a plain path"),
    (GOOD + "monitor: {prometheus_port: 80}\n", "monitor.prometheus_port",
     "is a privileged port (80) \u2014 use a port from 1024 to 65535, or 0 to turn the exporter off"),
    (GOOD + "monitor: {prometheus_port: 70000}\n", "monitor.prometheus_port", "must be at most 65535"),
    (GOOD + "monitor: {prometheus_port: -1}\n", "monitor.prometheus_port", "must be at least 0"),
    (GOOD + "monitor: {prometheus_port: on}\n", "monitor.prometheus_port", "expected an integer"),
])
def test_error_classes(run_cli, write, text, path, words):
    code, lines, file = _problems(run_cli, write, text)
    assert code == 2
    hits = [line for line in lines if line.startswith(f"{file}: {path}: ") or f": {path}: " in line]
    assert hits, f"no problem for {path} in {lines}"
    assert any(words in line and "\u2014" in line for line in hits), hits


def test_every_problem_is_reported(run_cli, write):
    code, lines, _ = _problems(run_cli, write, "name: j\ncommand: [x]\nresources: {nodes: 0, mem: 1Q, time: x}\n"
                                                "slurm: {partitoin: a}\n")
    assert code == 2
    paths = [line.split(": ")[1] for line in lines]
    assert {"resources.nodes", "resources.mem", "resources.time", "slurm.partitoin"} <= set(paths)


def test_profile_limits_partition(run_cli, write):
    code, lines, _ = _problems(run_cli, write, GOOD + "profile: a100-hpc\nslurm: {partition: bigmem}\n")
    assert code == 2 and any("slurm.partition" in x and "gpu, gpu-long, debug" in x for x in lines)


def test_training_limits(run_cli, write):
    code, lines, _ = _problems(run_cli, write, GOOD + "profile: a100-hpc\ntrain: {batch_per_gpu: 1024, lr: 5.0}\n")
    assert code == 2
    assert any("train.batch_per_gpu" in x and "512" in x for x in lines)
    assert any("train.lr" in x and "[1e-07, 1]" in x for x in lines)


def test_override_errors_name_the_command_line(run_cli, write):
    code, lines, _ = _problems(run_cli, write, GOOD, "resources.nodes=9")
    assert code == 2 and lines[0].startswith("command line (-o resources.nodes): resources.nodes:")
    code, lines, _ = _problems(run_cli, write, GOOD, "resources.nods=2")
    assert code == 2 and "did you mean 'resources.nodes'" in lines[0]


def test_override_keeps_strings_exact(write):
    from hpclaunch.spec.loading import resolve_job
    path = write("job.yaml", GOOD)
    r = resolve_job(path, ["name=007", "env.X=yes", "resources.nodes=1"])
    assert r.job.name == "007" and r.job.env["X"] == "yes" and r.job.resources.nodes == 1


def test_yaml_syntax_error_is_one_line(run_cli, write):
    code, lines, path = _problems(run_cli, write, "name: j\ncommand: [python\n")
    assert code == 2 and len(lines) == 1 and "job.yaml:3:1: YAML syntax error" in lines[0]


def test_duplicate_key(run_cli, write):
    code, lines, _ = _problems(run_cli, write, GOOD + "name: k\n")
    assert code == 2 and "duplicate key 'name'" in lines[0]


def test_missing_file_and_profile(run_cli, write, tmp_path):
    code, out, err = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert code == 2 and "no such job file" in err
    code, lines, _ = _problems(run_cli, write, GOOD + "profile: a100hpc\n")
    assert code == 2 and "did you mean 'a100-hpc'" in lines[0]


def test_profile_extends_cycle_and_bad_profile(run_cli, write):
    write("hpc_profiles/a.yaml", "name: a\nextends: b.yaml\nnode: {cpus: 2}\n")
    write("hpc_profiles/b.yaml", "name: b\nextends: a.yaml\nnode: {cpus: 2}\n")
    code, lines, _ = _problems(run_cli, write, GOOD + "profile: hpc_profiles/a.yaml\n")
    assert code == 2 and "cycle" in lines[0]
    write("hpc_profiles/c.yaml", "name: c\nnode: {cpus: many}\n")
    code, lines, _ = _problems(run_cli, write, GOOD + "profile: hpc_profiles/c.yaml\n")
    assert code == 2 and "c.yaml: node.cpus: expected an integer" in lines[0]


def test_user_profile_dir_comes_first(write, tmp_path, monkeypatch):
    from hpclaunch.spec.loading import resolve_job
    write("hpc_profiles/local.yaml", "name: mine\nnode: {cpus: 64}\n")
    monkeypatch.chdir(tmp_path)
    r = resolve_job(write("job.yaml", GOOD + "resources: {tasks_per_node: 32}\n"))
    assert r.profile.profile.name == "mine"


def test_no_traceback_in_a_real_process(write):
    path = write("job.yaml", "name: [\n")
    proc = hl("validate", path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""


def test_list_item_names_the_file_it_came_from(run_cli, write):
    # The profile sets `slurm:` defaults; the bad item is the job file's, and the error must say so.
    write("hpc_profiles/site.yaml", "name: site\nextends: local\ndefaults: {slurm: {partition: debug}}\n"
          "limits: {partitions: [debug]}\n")
    path = write("job.yaml", GOOD + "profile: hpc_profiles/site.yaml\nslurm: {extra: ['--nodes=3']}\n")
    code, out, err = run_cli("validate", path)
    assert code == 2
    assert err.strip().startswith(f"{path}: slurm.extra[0]: "), err


# --- wrong-typed sections: the loader says what it expected; no section is used that did not load ---

def _wrong_type_cases():
    """Every top-level key of a job file, each given a value of the wrong YAML type."""
    import typing
    from hpclaunch.spec.job import Job
    from dataclasses import fields, is_dataclass as is_model
    hints = typing.get_type_hints(Job)
    cases = []
    for f in fields(Job):
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
        optional = type(None) in typing.get_args(hints[f.name])
        tp = args[0] if optional and len(args) == 1 else hints[f.name]
        if is_model(tp) or typing.get_origin(tp) is dict:
            for text, got in (("5", "got an integer (5)"), ("[1]", "got a list ([1])"), ("null", "got null")):
                if not (text == "null" and optional):  # `sweep: null` is no sweep: valid
                    cases.append((f.name, text, "expected a mapping, " + got))
        elif typing.get_origin(tp) is list:
            cases.append((f.name, "{a: 1}", "expected a list, got a mapping"))
        else:  # a word: name, profile, launcher, workdir, runs_root
            cases.append((f.name, "{a: 1}", "got a mapping"))
    return cases


WRONG_TYPES = _wrong_type_cases()


def test_wrong_type_cases_cover_every_top_level_key():
    from hpclaunch.spec.job import Job
    from dataclasses import fields
    assert {key for key, _, _ in WRONG_TYPES} == {f.name for f in fields(Job)}
    # the derivation from the schema sorts the sections right (a slip would test them as words)
    mappings = {key for key, _, words in WRONG_TYPES if words.startswith("expected a mapping")}
    assert mappings == {"resources", "slurm", "env", "monitor", "requeue", "rendezvous", "train", "sweep", "container",
                        "kubernetes", "alerts", "recovery"}
    assert [key for key, _, words in WRONG_TYPES if words.startswith("expected a list")] == ["command"]


def _validate_in_a_process(path, *args):
    return hl("validate", path, *args, check=False, timeout=60)


@pytest.mark.parametrize("key,text,words", WRONG_TYPES, ids=[f"{k}={t}" for k, t, _ in WRONG_TYPES])
def test_a_wrong_typed_key_is_one_line_and_exit_2(write, key, text, words):
    lines = {"name": "j", "command": "[python, train.py]", key: text}
    path = write("job.yaml", "".join(f"{k}: {v}\n" for k, v in lines.items()))
    proc = _validate_in_a_process(path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == "", proc.stderr
    problems = proc.stderr.strip().splitlines()
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: {key}: ") and words in problems[0] and "\u2014" in problems[0], problems


@pytest.mark.parametrize("override,words", [
    ("resources=3", "resources: expected a mapping, got an integer (3)"),
    ("slurm=", "slurm: expected a mapping, got null"),
    ("env=[1]", "env: expected a mapping, got a list"),
    ("command={a: 1}", "command: expected a list, got a mapping"),
])
def test_a_wrong_typed_override_is_one_line_and_exit_2(write, override, words):
    proc = _validate_in_a_process(write("job.yaml", GOOD), "-o", override)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    key = override.split("=")[0]
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"command line (-o {key}): {words}"), proc.stderr


@pytest.mark.parametrize("text,where,words", [
    ("[1]: 2\n", "job.yaml:3:1: ", "keys must be strings, got a list ([1])"),
    ("{a: 1}: 2\n", "job.yaml:3:1: ", "keys must be strings, got a mapping ({a: 1})"),
    ("resources: {nodes: 1, [x, y]: 2}\n", "job.yaml:3:23: resources: ", "keys must be strings, got a list ([x, y])"),
    ("slurm:\n  extra:\n    - {[a]: 1}\n", "job.yaml:5:8: slurm.extra[0]: ", "keys must be strings"),
])
def test_a_key_that_is_not_a_string_is_one_line_and_exit_2(write, text, where, words):
    path = write("job.yaml", GOOD + text)
    proc = _validate_in_a_process(path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith(path[: -len("job.yaml")] + where + words), proc.stderr
    assert "quote the key" in proc.stderr


def test_rules_still_run_on_the_sections_that_loaded(run_cli, write):
    # `resources` did not load; the partition's form and the profile's epoch limit are still checked.
    code, lines, path = _problems(run_cli, write, GOOD + "resources: 5\nslurm: {partition: 'a b'}\n"
                                  "train: {epochs: 5000}\n")
    assert code == 2
    assert [line.split(": ")[1] for line in lines] == ["resources", "slurm.partition", "train.epochs"], lines


# --- where a missing profile was named ---

def test_a_missing_profile_names_the_file_or_the_override(run_cli, write):
    code, lines, path = _problems(run_cli, write, GOOD + "profile: a100hpc\n")
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"{path}: profile: no such profile ('a100hpc') \u2014 did you mean 'a100-hpc'?"), lines
    code, lines, _ = _problems(run_cli, write, GOOD, "profile=jetsn")
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("command line (-o profile): profile: no such profile ('jetsn') \u2014 "
                               "did you mean 'jetson-orin'?"), lines
    code, lines, path = _problems(run_cli, write, GOOD + "profile: profiles/nope.yaml\n")
    assert code == 2 and lines[0].startswith(f"{path}: profile: no such profile file ("), lines
    site = write("hpc_profiles/site.yaml", "name: site\nextends: lokal\nnode: {cpus: 2}\n")
    code, lines, _ = _problems(run_cli, write, GOOD + f"profile: {site}\n")
    assert code == 2 and lines[0].startswith(f"{site}: extends: no such profile ('lokal') \u2014 did you mean 'local'?"), lines


# --- sweeps over job keys that cannot vary ---

@pytest.mark.parametrize("parameters,path", [
    ("{resources.nodes: [1, 2]}", "sweep.parameters.resources.nodes"),
    ("{resources: {nodes: [1, 2]}}", "sweep.parameters.resources"),
    ("{launcher: [mpi, srun]}", "sweep.parameters.launcher"),
])
def test_a_refused_sweep_key_is_reported_once(run_cli, write, parameters, path):
    code, lines, _ = _problems(run_cli, write, GOOD + f"sweep: {{parameters: {parameters}}}\n")
    assert code == 2
    assert len(lines) == 1, lines
    assert f": {path}: only env.* and train.* job keys can vary" in lines[0], lines


# --- a sweep's env.NAME parameter is exported like an env: key, and checked like one ---

@pytest.mark.parametrize("name,values,value,words", [
    ("API_TOKEN", "[abc, def]", "abc", "looks like a secret; a job file's values are written into the job script "
                                       "('API_TOKEN')"),
    ("db_password", "{choice: [x]}", "x", "looks like a secret"),
    ("1X", "[a]", "a", "is not a valid environment variable name ('1X')"),
    ("SLURM_JOB_ID", "[a]", "a", "is set by hpclaunch or Slurm and cannot be overridden here"),
    ("OK", '[fine, "a\\0b"]', '"a\\0b"', "contains a NUL character, which no environment value can carry ('a\\x00b')"),
])
def test_a_swept_env_name_gets_the_env_section_checks(run_cli, write, name, values, value, words):
    code, lines, file = _problems(run_cli, write, GOOD + f"sweep: {{parameters: {{env.{name}: {values}}}}}\n")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{file}: sweep.parameters.env.{name}: {words}") and " \u2014 " in lines[0], lines
    # word for word what the env: section says about that name and value
    _, env_lines, _ = _problems(run_cli, write, GOOD + f"env: {{{name}: {value}}}\n")
    assert [line.split(f"env.{name}: ", 1)[1] for line in env_lines] == [lines[0].split(f"env.{name}: ", 1)[1]]


def test_a_secret_swept_env_value_never_reaches_the_script(write):
    path = write("job.yaml", GOOD + "sweep: {parameters: {env.MY_API_KEY: [s3cr3t-value]}}\n")
    proc = hl("render", path, check=False)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1 and "sweep.parameters.env.MY_API_KEY: looks like a secret" in proc.stderr


@pytest.mark.parametrize("parameter,words", [
    ("env.OK: 5", "is not a parameter spec (5)"),
    ("env.OK: []", "has no values ([])"),
    ("train.lr: {uniform: [0.1, 0.2]}", "uniform draws random values"),
])
def test_a_swept_job_key_gets_the_spec_checks(write, parameter, words):
    # a dotted name used to skip them: `env.OK: 5` was a traceback, `env.OK: []` a sweep of no tasks
    path = write("job.yaml", GOOD + f"sweep: {{parameters: {{{parameter}}}}}\n")
    proc = hl("render", path, check=False)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    name = parameter.split(":")[0]
    assert proc.stderr.splitlines() == [proc.stderr.strip()] and f": sweep.parameters.{name}: {words}" in proc.stderr


# --- a swept train.KEY is read by the ranks as a train: setting: it gets train:'s checks ---

@pytest.mark.parametrize("parameter,words", [
    ("train.epochs: [1, 2.5]", "expected an integer, got a number (2.5) \u2014 write an integer here"),
    ("train.epochs: {range: [0, 3]}", "must be at least 1 (0)"),
    ("train.precision: [fp32, fp64]", "is not a valid choice ('fp64') \u2014 did you mean 'fp16'?"),
    ("train.async_checkpoint: [yes-please]", "expected true or false, got a string"),
    ("train.epochs: {uniform: [1, 3]}", "uniform draws fractional numbers, and train.epochs refuses them"),
    ("train.lr: {uniform: [-1, 3]}", "must be at least 0 (-1)"),
    ("train.epochs: [1, 2000]", "profile 'a100-hpc' allows at most 1000 epochs (2000)"),
    ("train.lr: {loguniform: [1.0e-9, 0.1]}", "profile 'a100-hpc' allows learning rates in [1e-07, 1] (1e-09)"),
    ("train.batch_per_gpu: [16, 48]", "not a multiple of batch_per_gpu x world size = 48 x 4 (512)"),
])
def test_a_swept_train_value_gets_the_train_section_checks(run_cli, write, parameter, words):
    method = "random\n  samples: 3" if "uniform" in parameter else "grid"
    code, lines, file = _problems(run_cli, write, "name: j\ncommand: [python, train.py]\nprofile: a100-hpc\n"
                                  "resources: {nodes: 1, tasks_per_node: 4, gpus_per_node: 4}\n"
                                  f"train: {{global_batch: 512}}\nsweep:\n  method: {method}\n"
                                  f"  parameters: {{{parameter}}}\n")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{file}: sweep.parameters.{parameter.split(':')[0]}: {words}"), lines


def test_swept_train_values_within_the_limits_pass(run_cli, write):
    code, lines, _ = _problems(run_cli, write, "name: j\ncommand: [python, train.py]\nprofile: a100-hpc\n"
                               "resources: {nodes: 1, tasks_per_node: 4, gpus_per_node: 4}\n"
                               "train: {global_batch: 512}\nsweep:\n  parameters: {train.batch_per_gpu: [16, 32], "
                               "train.epochs: {range: [1, 1001, 500]}, train.precision: [bf16, fp32]}\n")
    assert code == 0 and lines == [], lines


def test_a_nul_in_a_placeholder_value_is_refused(write):
    path = write("job.yaml", 'name: j\ncommand: [python, train.py, "{tag}"]\n'
                             'sweep: {parameters: {tag: [ok, "a\\0b"]}}\n')
    proc = hl("render", path, check=False)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "sweep.parameters.tag: contains a NUL character" in proc.stderr and "('a\\x00b')" in proc.stderr


# --- a profile's env: names are written after `export` like the job's ---

def test_a_profile_env_name_gets_the_env_checks_and_cannot_inject(write, tmp_path):
    write("hpc_profiles/evil.yaml", 'name: evil\nextends: local\nenv:\n  "A=1; touch pwned; B": x\n'
                                    "  SITE_TOKEN: abc\n  SLURM_JOB_ID: '3'\n  NCCL_DEBUG: WARN\n")
    path = write("job.yaml", GOOD + "profile: hpc_profiles/evil.yaml\n")
    proc = hl("render", path, check=False, cwd=str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == [
        "hpc_profiles/evil.yaml: env.A=1; touch pwned; B: is not a valid environment variable name "
        "('A=1; touch pwned; B') \u2014 use letters, digits and _, not starting with a digit",
        "hpc_profiles/evil.yaml: env.SITE_TOKEN: looks like a secret; a profile's values are written into the job "
        "script ('SITE_TOKEN') \u2014 remove it here and `export SITE_TOKEN` in your shell: the job inherits it by name",
        "hpc_profiles/evil.yaml: env.SLURM_JOB_ID: is set by hpclaunch or Slurm and cannot be overridden here "
        "('SLURM_JOB_ID') \u2014 pick another name"], proc.stderr
    assert not (tmp_path / "pwned").exists()


# --- a value ending in a newline would split its #SBATCH line ---

@pytest.mark.parametrize("text,path", [
    ('slurm: {partition: "debug\\n"}\n', "slurm.partition"),
    ('slurm: {extra: ["--begin=now+60\\n"]}\n', "slurm.extra[0]"),
    ('resources: {mem: "1G\\n"}\n', "resources.mem"),
    ('resources: {time: "10\\n"}\n', "resources.time"),
    ('runs_root: "runs\\n"\n', "runs_root"),
    ('env: {"A\\n": x}\n', "env.A\\n"),
])
def test_a_trailing_newline_is_refused(run_cli, write, text, path):
    code, lines, file = _problems(run_cli, write, GOOD + text)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{file}: {path}: "), lines
    code, out, err = run_cli("render", file)
    assert code == 2 and out == ""


def test_a_trailing_newline_from_the_command_line_is_refused(run_cli, write):
    code, lines, _ = _problems(run_cli, write, GOOD, "slurm.partition=debug\n")
    assert code == 2 and lines == ["command line (-o slurm.partition): slurm.partition: is not a valid partition "
                                   "name ('debug\\n') \u2014 use letters, digits and _ . , : + @ % = - only"], lines


@pytest.mark.parametrize("profile,container,words", [
    ("local", "{image: img}", "container: profile 'local' names no container runtime"),
    ("PODMAN", "{image: img, mounts: ['data:/data']}", "container.mounts: entry 'data:/data' is not a mount"),
    ("PODMAN", "{image: 'img; rm -rf /'}", "container.image: is not an image reference"),
    ("PODMAN", "{image: img, env: ['A B']}", "container.env: entry 'A B' is not a variable name"),
    ("PODMAN", "{image: img, workdir: rel}", "container.workdir: is not an absolute plain path"),
    ("PYXIS", "{image: img}", "pyxis containers start with srun, but profile 'pyx' starts mpi ranks with mpirun"),
])
def test_container_refusals_are_one_line(write, profile, container, words):
    pod = write("hpc_profiles/pod.yaml", "name: pod\nextends: local\ncontainer: {runtime: podman}\n")
    pyx = write("hpc_profiles/pyx.yaml", "name: pyx\nextends: local\ncontainer: {runtime: pyxis}\n"
                                         "mpi: {starter: mpirun}\n")
    profile = {"PODMAN": pod, "PYXIS": pyx}.get(profile, profile)
    path = write("job.yaml", f"name: j\nprofile: {profile}\nlauncher: mpi\ncommand: [python, t.py]\n"
                             f"container: {container}\n")
    proc = _validate_in_a_process(path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines


# --- monitor.prometheus_port: the profile's is the site default, the job's wins, 0 turns it off ---

def test_prometheus_port_comes_from_the_profile_the_job_wins_and_0_turns_it_off(write, tmp_path):
    write("hpc_profiles/site.yaml", "name: site\nextends: local\nmonitor: {prometheus_port: 9400}\n")
    path = write("job.yaml", GOOD + "profile: hpc_profiles/site.yaml\n")

    def monitor_line(*overrides):
        args = [a for o in overrides for a in ("-o", o)]
        script = hl("render", path, *args, cwd=str(tmp_path)).stdout
        [line] = [ln for ln in script.splitlines() if ln.startswith("hl_monitor=(")]
        return line

    assert monitor_line().endswith(" --prometheus-port 9400)")
    assert monitor_line("monitor.prometheus_port=9555").endswith(" --prometheus-port 9555)")
    assert "--prometheus-port" not in monitor_line("monitor.prometheus_port=0")
    assert "--prometheus-port" not in hl("render", write("plain.yaml", GOOD), cwd=str(tmp_path)).stdout
    off = hl("render", path, "-o", "monitor.interval=0", cwd=str(tmp_path)).stdout
    assert "hpclaunch.monitors" not in off   # no monitor, so no exporter either
    write("hpc_profiles/bad.yaml", "name: bad\nextends: local\nmonitor: {prometheus_port: 443}\n")
    proc = hl("validate", write("j2.yaml", GOOD + "profile: hpc_profiles/bad.yaml\n"), check=False, cwd=str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "hpc_profiles/bad.yaml: monitor.prometheus_port: must be at least 1024 (443) \u2014 use a value >= 1024"], \
        proc.stderr
