"""Programs that never heard of hpclaunch on the local backend: what srun gives each task, JAX and
Lightning finding their Slurm cluster, train_entry as one world under a local step, MPI, Horovod and
TensorFlow's launchers, and the GPU framework bench on the CPU."""
import json
import os
import socket
import subprocess
import sys

import pytest
from hlcli import hl, job_file


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def run_two_ranks(tmp_path, name, launcher, command):
    """Submit a one-node, two-rank local job of ``command`` (a list) and wait: (submit's process,
    the job's status JSON, every rank's log as `hpclaunch logs` shows them)."""
    job = job_file(tmp_path, f"""
name: {name}
launcher: {launcher}
command: {json.dumps(command)}
resources: {{nodes: 1, tasks_per_node: 2, time: "00:05:00"}}
monitor: {{interval: 0}}
""")
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False, timeout=300)
    st = json.loads(hl("status", name, "--json", cwd="/").stdout)
    return proc, st, hl("logs", name, cwd="/").stdout


def test_each_local_task_has_the_variables_srun_sets(hpc_home, tmp_path):
    """The local step gives every task what srun gives it: JAX's cluster detection reads the step's
    node list (without it jax.distributed.initialize() found no coordinator), TensorFlow's resolver
    the step's tasks per node."""
    names = ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_STEP_ID",
             "SLURM_STEPID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST",
             "SLURM_STEP_TASKS_PER_NODE", "SLURM_GTIDS", "SLURMD_NODENAME", "SLURM_JOB_NODELIST",
             "SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE", "SLURM_CPUS_ON_NODE"]
    script = f'for v in {" ".join(names)}; do printf "%s=%s\\n" $v "${{!v}}"; done'
    proc, st, _ = run_two_ranks(tmp_path, "step vars", "srun", ["bash", "-c", script])
    assert proc.returncode == 0, proc.stderr
    for r in range(2):
        text = open(os.path.join(st["run_dir"], "logs", "attempt0", f"rank{r}.log")).read()
        got = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
        assert got == {"SLURM_PROCID": str(r), "SLURM_LOCALID": str(r), "SLURM_NODEID": "0", "SLURM_NTASKS": "2",
                       "SLURM_NPROCS": "2", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_STEP_NUM_TASKS": "2",
                       "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": "localhost",
                       "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_GTIDS": "0,1",
                       "SLURMD_NODENAME": socket.gethostname(), "SLURM_JOB_NODELIST": "localhost",
                       "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_CPUS_PER_NODE": "2", "SLURM_CPUS_ON_NODE": "2"}, got


@pytest.mark.parametrize("program, args, expect", [
    ("jax_allgather.py", [], ["process 0/2 host {h} sum 1", "process 1/2 host {h} sum 1"]),
    ("lightning_ddp.py", ["1", "2"], ["world size 2 ok", "rank 1/2 node 0 host {h}"]),
    ("fabric_ddp.py", ["1", "2"], ["fabric rank 0/2 node 0 host {h} ", "fabric rank 1/2 node 0 host {h} "]),
])
def test_frameworks_find_their_slurm_cluster_in_a_local_job(hpc_home, tmp_path, program, args, expect):
    """JAX's jax.distributed.initialize() and Lightning's SLURMEnvironment, with no arguments and no
    hpclaunch in them, on the local backend as under Slurm."""
    proc, _, logs = run_two_ranks(tmp_path, "framework", "srun",
                                  [sys.executable, os.path.join(EXAMPLES, program), *args])
    assert proc.returncode == 0, logs[-3000:] + proc.stderr[-2000:]
    for line in expect:
        assert line.format(h=socket.gethostname()) in logs, logs[-3000:]


def test_train_entry_under_a_local_srun_step_is_one_world(hpc_home, tmp_path):
    """Without the step's variables each task of a local srun step took itself for a single
    process (train_entry's srun detection wants SLURM_STEP_ID, as the batch shell is no rank): two
    worlds of one, both rank 0, writing the same checkpoints."""
    from hpclaunch.train_entry.digits import write_digits_csv

    data = tmp_path / "digits.csv"
    write_digits_csv(str(data))
    proc, st, _ = run_two_ranks(tmp_path, "srun world", "srun", [sys.executable, "-m", "hpclaunch.train_entry",
                                                                 "--data", str(data), "--epochs", "1"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    for r in range(2):
        log = open(os.path.join(st["run_dir"], "logs", "attempt0", f"rank{r}.log")).read()
        assert f"rank={r} local_rank={r} world_size=2 " in log and "launcher=srun" in log, log[-2000:]


def test_the_gpu_framework_bench_runs_here_on_the_cpu(tmp_path):
    """bench/gpu/frameworks_gpu.py runs on a GPU only when one is lent: here its JAX and Lightning
    jobs run on the CPU through the local backend, so the script cannot rot between loans."""
    script = os.path.join(os.path.dirname(EXAMPLES), "bench", "gpu", "frameworks_gpu.py")
    proc = subprocess.run([sys.executable, script, "--out", str(tmp_path / "out"), "--seconds", "1"],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "\n0 check(s) failed" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "jax process 0/1 on cpu" in proc.stdout and "lightning rank 0/1 on cpu" in proc.stdout, proc.stdout[-3000:]
    kept = sorted(p.name for p in (tmp_path / "out").glob("report-*.json"))
    assert len(kept) == 2 and all("duration_s" in json.loads((tmp_path / "out" / k).read_text()) for k in kept), kept


def _horovod_missing():
    import importlib.util
    return None if importlib.util.find_spec("horovod") else "horovod is not installed: run `make horovod`"


@pytest.mark.parametrize("launcher, program, expect", [
    # mpirun read the allocation as Open MPI's Slurm support does and stopped at the missing
    # SLURM_TASKS_PER_NODE ("the SLURM resource allocator expects to find ...")
    ("mpi", "mpi_allreduce.py", ["rank 0/2 host {h} sum 3 ok", "rank 1/2 host {h} sum 3 ok"]),
    ("horovod", "hvd_check.py", ["rank hosts: 0={h} 1={h}", "params identical: True"]),
    ("tensorflow", "tf_multiworker.py", ["worker 0/2 host {h} ", "worker 1/2 host {h} "]),
])
def test_mpi_horovod_and_tensorflow_launchers_on_the_local_backend(hpc_home, tmp_path, require, launcher, program,
                                                                  expect):
    python = sys.executable
    if launcher == "horovod":
        require(_horovod_missing(), "the local horovod test")
    if launcher == "tensorflow":  # TensorFlow lives in a venv of its own (make tf-venv; make test makes it)
        python = os.path.join(os.path.dirname(EXAMPLES), ".venv-tf", "bin", "python")
        require(None if os.path.exists(python) else "no .venv-tf: make tf-venv", "the local tensorflow test")
    proc, _, logs = run_two_ranks(tmp_path, f"{launcher} here", launcher, [python, os.path.join(EXAMPLES, program)])
    assert proc.returncode == 0, logs[-3000:] + proc.stderr[-2000:]
    for line in expect:
        assert line.format(h=socket.gethostname()) in logs, logs[-3000:]
    if launcher == "tensorflow":  # each worker trained on its own data: equal only if all-reduced
        sums = {line.rsplit("checksum", 1)[1].strip() for line in logs.splitlines() if line.startswith("worker ")}
        assert len(sums) == 1, logs[-3000:]


def test_mpi4pys_own_helloworld_and_what_srun_tasks_without_mpi_tell_its_user(hpc_home, tmp_path):
    """mpi4py's program as shipped in its wheel (``python -m mpi4py.bench helloworld``): under the mpi
    launcher each rank says its place; as plain srun tasks (launcher: srun, no MPI plugin) Open MPI
    refuses to start, and the summary names the launcher to use, from a line that is not among the
    rank's last ones."""
    command = [sys.executable, "-m", "mpi4py.bench", "helloworld"]
    proc, st, logs = run_two_ranks(tmp_path, "mpi4py hello", "mpi", command)
    assert proc.returncode == 0 and st["exit_code"] == 0, logs[-3000:] + proc.stderr[-2000:]
    host = socket.gethostname()
    for rank in (0, 1):
        assert f"Hello, World! I am process {rank} of 2 on {host}." in logs, logs[-3000:]
    proc, st, logs = run_two_ranks(tmp_path, "mpi4py as srun tasks", "srun", command)
    assert proc.returncode == 1 and st["state"] == "FAILED", proc.stderr[-3000:]
    assert 'direct launched using "srun"' not in proc.stderr  # not among the last lines the summary shows
    assert "an MPI program started as plain srun tasks, without an MPI plugin (launcher: srun): use launcher: mpi" \
        in proc.stderr, proc.stderr[-3000:]
