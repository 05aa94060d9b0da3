"""Every class of bad input: one line per problem, naming file, field path, value and fix; exit 2."""
import os
import subprocess
import sys

import pytest

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
    ("name: j\n", "command", "is required"),
    ("name: j\ncommand: python train.py\n", "command", "expected a list"),
    ("name: j\ncommand: []\n", "command", "is empty"),
    (GOOD + "runs_root: 'my runs'\n", "runs_root", "not a plain path"),
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
    from hpclaunch.loading import resolve_job
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
    from hpclaunch.loading import resolve_job
    write("hpc_profiles/local.yaml", "name: mine\nnode: {cpus: 64}\n")
    monkeypatch.chdir(tmp_path)
    r = resolve_job(write("job.yaml", GOOD + "resources: {tasks_per_node: 32}\n"))
    assert r.profile.profile.name == "mine"


def test_no_traceback_in_a_real_process(write):
    path = write("job.yaml", "name: [\n")
    proc = subprocess.run([sys.executable, "-m", "hpclaunch", "validate", path], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stdout == ""


def test_list_item_names_the_file_it_came_from(run_cli, write):
    # The profile sets `slurm:` defaults; the bad item is the job file's, and the error must say so.
    write("hpc_profiles/site.yaml", "name: site\nextends: local\ndefaults: {slurm: {partition: debug}}\n"
          "limits: {partitions: [debug]}\n")
    path = write("job.yaml", GOOD + "profile: hpc_profiles/site.yaml\nslurm: {extra: ['--nodes=3']}\n")
    code, out, err = run_cli("validate", path)
    assert code == 2
    assert err.strip().startswith(f"{path}: slurm.extra[0]: "), err
