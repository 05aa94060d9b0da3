"""Launch modes for the rest of the field (issue 16), each a real 2-node job on the test cluster with
a program that knows nothing of hpclaunch: Ray (launcher: ray), JAX and Lightning (launcher: srun)."""
import json
import os
import re
import subprocess
import time

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def submit_wait(tmp_path, text, check=True):
    (tmp_path / "job.yaml").write_text(text)
    proc = hl("submit", "job.yaml", "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False, timeout=400)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    return proc, run_dir


def rank_log(run_dir, rank):
    return open(os.path.join(run_dir, "logs", "attempt0", f"rank{rank}.log")).read()


def ray_left(wait: float = 0.0):
    """Ray processes still on this machine (the test nodes are namespaces of it). ``wait``: up to that
    many seconds for the ones already on their way out (a stopped raylet's workers exit on their own,
    a moment after the job: on a loaded machine, after `submit --wait` has returned)."""
    deadline = time.time() + wait
    while True:
        out = subprocess.run(["pgrep", "-af", r"raylet|gcs_server|ray::|ray start|hpclaunch-ray-"],
                             capture_output=True, text=True).stdout
        left = [line for line in out.splitlines() if "pgrep" not in line]
        if not left or time.time() >= deadline:
            return left
        time.sleep(0.5)


def completed_after_driver(run_dir, job_id) -> float:
    """Seconds from the driver's end (rank0.exit: its exit code and time) to the job's COMPLETED in sacct
    (asked again for up to 10 s while slurmdbd has not recorded the end yet)."""
    rc, driver_end = open(os.path.join(run_dir, "logs", "attempt0", "rank0.exit")).read().split()
    deadline = time.time() + 10
    while True:
        end = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,End", "--noconvert"],
                             capture_output=True, text=True).stdout.strip().split("|")
        if (end[0] == "COMPLETED" and end[-1][:1].isdigit()) or time.time() >= deadline:
            break
        time.sleep(0.5)
    assert rc == "0" and end[0] == "COMPLETED", end
    return time.mktime(time.strptime(end[1], "%Y-%m-%dT%H:%M:%S")) - float(driver_end)


def test_ray_two_nodes_driver_sees_the_allocation_and_nothing_is_left(slurm, hpc_home, tmp_path):
    assert not ray_left(), ray_left()
    proc, run_dir = submit_wait(tmp_path, f"""
name: ray-two
profile: testcluster
launcher: ray
command: [python, {EXAMPLES}/ray_hosts.py, "4"]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 2, time: "00:05:00"}}
monitor: {{interval: 1}}
""")
    log = rank_log(run_dir, 0)
    assert "cpus 4 nodes 2 hosts c1 c2 driver c1" in log, log
    job_id = json.loads(hl("status", run_dir, "--json").stdout)["job_id"]
    assert completed_after_driver(run_dir, job_id) < 15
    left = ray_left(wait=10)
    assert not left, left
    assert not [p for p in os.listdir("/tmp") if p.startswith(f"hpclaunch-ray-{os.getuid()}-{job_id}-")]
    assert {"ray-c1.log", "ray-c2.log"} <= set(os.listdir(os.path.join(run_dir, "logs", "attempt0")))


def test_ray_train_spreads_its_workers_over_the_nodes(slurm, hpc_home, tmp_path):
    """Ray Train's TorchTrainer (DDP over gloo), as Ray's docs write it: its two workers on the two
    nodes, their replicas equal after training on different data, and nothing of Ray left."""
    proc, run_dir = submit_wait(tmp_path, f"""
name: ray-train
profile: testcluster
launcher: ray
command: [python, {EXAMPLES}/ray_train.py, "2"]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 2, time: "00:05:00"}}
monitor: {{interval: 0}}
env: {{RAY_DEDUP_LOGS: "0"}}
""")
    log = rank_log(run_dir, 0)
    # Ray relays each worker's line (with its colours). Without RAY_DEDUP_LOGS=0 it folds lines that
    # differ only in words with digits into one "[repeated Nx across cluster]": one worker's went.
    workers = {m[0]: (m[1], m[2]) for m in re.findall(r"worker rank (\d/2) host (\S+) weights (\[[^\]]*\])", log)}
    assert set(workers) == {"0/2", "1/2"} and {h for h, _ in workers.values()} == {"c1", "c2"}, log[-3000:]
    assert len({w for _, w in workers.values()}) == 1, workers     # DDP kept the replicas in step
    assert "fit done, error: None" in log, log[-3000:]
    left = ray_left(wait=10)
    assert not left, left


def test_ray_trains_own_example_as_shipped_ends_with_its_driver(slurm, hpc_home, tmp_path):
    """Ray Train's example as its wheel ships it (``python -m ray.train.examples.pytorch.torch_linear_example``),
    run as Ray's docs run it on a cluster. Its finished run leaves Ray Train's actors behind, and Ray
    2.60 then drained the head for 30 s on SIGTERM before stopping: the job ended 30 s after its driver."""
    _, run_dir = submit_wait(tmp_path, """
name: ray-linear
profile: testcluster
launcher: ray
command: [python, -m, ray.train.examples.pytorch.torch_linear_example, --num-workers, "2", --epochs, "2"]
resources: {nodes: 2, tasks_per_node: 1, cpus_per_task: 2, time: "00:05:00"}
monitor: {interval: 0}
""")
    log = rank_log(run_dir, 0)
    assert re.search(r"^\{'loss': [0-9.e-]+\}$", log, re.M), log[-3000:]  # the result the example prints
    assert "Reporting training result 2" in log, log[-3000:]
    job_id = json.loads(hl("status", run_dir, "--json").stdout)["job_id"]
    assert completed_after_driver(run_dir, job_id) < 15
    left = ray_left(wait=10)
    assert not left, left


def test_ray_driver_that_raises_fails_the_job_with_its_exit_code(slurm, hpc_home, tmp_path):
    (tmp_path / "bad.py").write_text("import ray, sys\nray.init()\nprint('about to fail', flush=True)\nsys.exit(7)\n")
    proc, run_dir = submit_wait(tmp_path, f"""
name: ray-bad
profile: testcluster
launcher: ray
command: [python, {tmp_path}/bad.py]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
""", check=False)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    st = json.loads(hl("status", run_dir, "--json").stdout)
    assert st["state"] == "FAILED" and st["exit_code"] == 7, st
    assert "about to fail" in rank_log(run_dir, 0)
    left = ray_left(wait=10)
    assert not left, left


def test_jax_distributed_initialize_with_no_arguments(slurm, hpc_home, tmp_path):
    _, run_dir = submit_wait(tmp_path, f"""
name: jax-two
profile: testcluster
launcher: srun
command: [python, {EXAMPLES}/jax_allgather.py]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
""")
    assert "process 0/2 host c1 sum 1" in rank_log(run_dir, 0)
    assert "process 1/2 host c2 sum 1" in rank_log(run_dir, 1)


def test_lightning_ddp_two_nodes_two_devices(slurm, hpc_home, tmp_path):
    _, run_dir = submit_wait(tmp_path, f"""
name: lightning-two
profile: testcluster
launcher: srun
command: [python, {EXAMPLES}/lightning_ddp.py, "2", "2"]
resources: {{nodes: 2, tasks_per_node: 2, time: "00:05:00"}}
monitor: {{interval: 0}}
""")
    assert "world size 4 ok" in rank_log(run_dir, 0)
    hosts = {r: rank_log(run_dir, r).split(" host ")[1].split()[0] for r in range(4)}
    assert hosts == {0: "c1", 1: "c1", 2: "c2", 3: "c2"}, hosts


def test_lightning_fabric_two_nodes_two_devices(slurm, hpc_home, tmp_path):
    """Fabric's loop (launch, setup, backward) finds its 4 ranks on 2 nodes from Slurm's variables; each
    trains on its own data and all end with the same weights (DDP averaged the gradients)."""
    _, run_dir = submit_wait(tmp_path, f"""
name: fabric-two
profile: testcluster
launcher: srun
command: [python, {EXAMPLES}/fabric_ddp.py, "2", "2"]
resources: {{nodes: 2, tasks_per_node: 2, time: "00:05:00"}}
monitor: {{interval: 0}}
""")
    got = [re.search(r"fabric rank (\d)/4 node (\d) host (\S+) weights (\[.*\])", rank_log(run_dir, r)).groups()
           for r in range(4)]
    assert [g[:3] for g in got] == [("0", "0", "c1"), ("1", "0", "c1"), ("2", "1", "c2"), ("3", "1", "c2")], got
    assert len({g[3] for g in got}) == 1, got


def submit_tf_job(tmp_path, name, extra=""):
    """A 2-node MultiWorkerMirroredStrategy job; asserts each worker's host and that the workers'
    variables agree (each trained on its own data: equal only if all-reduced). Returns the run dir."""
    # TensorFlow lives in a venv of its own (make tf-venv): the program's environment need not hold hpclaunch
    python = os.path.join(os.path.dirname(EXAMPLES), ".venv-tf", "bin", "python")
    assert os.path.exists(python), "TensorFlow's venv is missing: make tf-venv (make test runs it)"
    _, run_dir = submit_wait(tmp_path, f"""
name: {name}
profile: testcluster
launcher: tensorflow
command: [{python}, {EXAMPLES}/tf_multiworker.py]
resources: {{nodes: 2, tasks_per_node: 1, time: "00:05:00"}}
monitor: {{interval: 0}}
{extra}""")
    lines = [rank_log(run_dir, r).strip().splitlines()[-1] for r in (0, 1)]
    assert lines[0].startswith("worker 0/2 host c1 ") and lines[1].startswith("worker 1/2 host c2 "), lines
    assert lines[0].split("checksum ")[1] == lines[1].split("checksum ")[1], lines
    return run_dir


def test_tensorflow_multiworker_variables_agree_across_nodes(slurm, hpc_home, tmp_path):
    run_dir = submit_tf_job(tmp_path, "tf-two")
    script = open(os.path.join(run_dir, "script.sbatch")).read()
    assert "TF_CONFIG" in script


def test_tensorflow_worker_ports_are_checked_free_on_every_node(slurm, hpc_home, tmp_path):
    """A worker's port taken on c2 only (the head, c1, has it free: the rendezvous check alone would
    pass): the workers move to the next base free on both nodes, and training works."""
    port = 29417
    holder = subprocess.Popen(["ip", "netns", "exec", "sn2", "python3", "-c",
                               "import socket, time\ns = socket.socket()\n"
                               f"s.bind(('', {port}))\ns.listen()\nprint('held', flush=True)\ntime.sleep(600)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        run_dir = submit_tf_job(tmp_path, "tf-ports", f"rendezvous: {{port: {port}}}\n")
    finally:
        holder.kill()
        holder.wait()
    out = open(os.path.join(run_dir, "logs", "slurm.out")).read()
    assert f"ports from {port} are taken on some node; using {port + 1}" in out, out


# Ray's Slurm guide (doc/source/cluster/doc_code/simple-trainer.py, which its slurm-basic.sh runs after
# exporting ip_head=<head ip>:<port>) joins the cluster through `ray.init(address=os.environ["ip_head"])`.
# This is that program's behaviour in this project's words (its text is Ray's, not ours to copy): the
# CPU count as its argument, the cluster's nodes, rounds of one-second tasks counted by address. Set
# HPCLAUNCH_RAY_DOC_SCRIPT to a copy of Ray's own file to run it unchanged instead (done by hand for issue 45).
RAY_DOC_TRAINER = r"""
import os, socket, sys, time
from collections import Counter
import ray

num_cpus = int(sys.argv[1])
ray.init(address=os.environ["ip_head"])
print("Nodes in the Ray cluster:")
print(ray.nodes())

@ray.remote
def f():
    time.sleep(1)
    return socket.gethostbyname("localhost")

for i in range(5):
    start = time.time()
    print(Counter(ray.get([f.remote() for _ in range(num_cpus)])))
    print(time.time() - start)
"""


def test_rays_slurm_guide_program_runs_as_its_docs_write_it(slurm, hpc_home, tmp_path):
    """launcher: ray exports the variable Ray's Slurm guide reads (ip_head), as well as RAY_ADDRESS;
    the job runs on both nodes, and says so when it ends."""
    script = os.environ.get("HPCLAUNCH_RAY_DOC_SCRIPT") or str(tmp_path / "simple-trainer.py")
    if "HPCLAUNCH_RAY_DOC_SCRIPT" not in os.environ:
        (tmp_path / "simple-trainer.py").write_text(RAY_DOC_TRAINER)
    proc, run_dir = submit_wait(tmp_path, f"""
name: ray-docs
profile: testcluster
launcher: ray
command: [python, {script}, "4"]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 2, time: "00:05:00"}}
monitor: {{interval: 0}}
""")
    log = rank_log(run_dir, 0)
    assert "Nodes in the Ray cluster:" in log and log.count("'Alive': True") == 2, log[-3000:]
    assert re.search(r"^Counter\(\{'127\.0\.0\.1': 4\}\)$", log, re.M), log[-3000:]
    assert "COMPLETED on c[1-2] attempt 0" in proc.stderr, proc.stderr      # every node of the allocation
    job_id = json.loads(hl("status", run_dir, "--json").stdout)["job_id"]
    mine = f"hpclaunch-ray-{os.getuid()}-{job_id}-"   # the machine is shared: other jobs' Ray is not this one's
    deadline = time.time() + 10
    while [p for p in ray_left() if mine in p] and time.time() < deadline:
        time.sleep(0.5)
    assert not [p for p in ray_left() if mine in p]
