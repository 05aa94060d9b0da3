"""Recovery inside the allocation on the real test cluster, with nodes that really die (docs/recovery.md):
a 3-node cluster (2 working + 1 spare), one trial each; the 20-trial figures are bench/goodput's.

Runs after the 2-node tests (by name, before test_zz_cluster_scale.py): it waits for the queue to
empty, replaces the usual 2-node cluster with 3 nodes, and puts the 2-node one back afterwards. A
node dies as a machine's processes all do: SIGKILL to every process in its network namespace
(slurmd, sshd, the job's steps and ranks); it comes back (slurmd and sshd restarted) after each test.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODES = 3
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GAVE_UP", "NODE_FAIL")


def _wait_for_empty_queue(limit_s: float = 600) -> None:
    deadline = time.time() + limit_s
    quiet_since = None
    while time.time() < deadline:
        proc = subprocess.run(["squeue", "-h"], capture_output=True, text=True)
        if proc.returncode == 0 and not proc.stdout.strip():
            quiet_since = quiet_since or time.time()
            if time.time() - quiet_since >= 20:
                return
        else:
            quiet_since = None
        time.sleep(2)


@pytest.fixture(scope="module")
def cluster3(slurm):
    fx = sys.modules["hpclaunch_cluster_fixture"]  # loaded by conftest.py
    _wait_for_empty_queue()
    try:
        os.environ.update(fx.ensure_cluster(nodes=NODES))
        yield fx
    finally:
        _wait_for_empty_queue(120)
        os.environ.update(fx.ensure_cluster(nodes=2))


@pytest.fixture
def revive(cluster3):
    dead = []
    yield dead
    for i in dead:
        cluster3.revive_node(i)


def submit(tmp_path, text, name="job.yaml"):
    job = tmp_path / name
    job.write_text(text)
    out = hl("submit", str(job), "--backend", "slurm", "--json", cwd=str(tmp_path))
    rec = json.loads(out.stdout)
    return rec["job_id"], rec["run_dir"]


def status(job_id, cwd):
    return json.loads(hl("status", job_id, "--json", cwd=str(cwd)).stdout)


def wait_end(job_id, cwd, limit=600, run_dir=None, revive=None):
    """Until the job ends. With `revive` ([node numbers] of killed nodes): they come back as soon as the
    batch script has ended the job (else Slurm holds the job COMPLETING until it gives up on them)."""
    deadline = time.time() + limit
    while time.time() < deadline:
        if revive and run_dir and any(re.search(r" end rc=\S+ outcome=(completed|failed|gave_up)", line)
                                      for line in state_lines(run_dir)[-1:]):
            fx = sys.modules["hpclaunch_cluster_fixture"]
            while revive:
                fx.revive_node(revive.pop())
        st = status(job_id, cwd)
        if st["state"] in FINAL:
            return st
        time.sleep(2)
    raise AssertionError(f"job {job_id} did not end within {limit} s: {status(job_id, cwd)}")


def state_lines(run_dir):
    try:
        return open(os.path.join(run_dir, ".hpclaunch", "state")).read().splitlines()
    except OSError:
        return []


def launches(run_dir):
    """[(attempt, [nodes])] of each start of the step."""
    out = []
    for line in state_lines(run_dir):
        m = re.match(r"\d+ attempt=(\d+) launch nodes=(\S+)", line)
        if m:
            out.append((int(m.group(1)), m.group(2).split(",")))
    return out


def steps(run_dir, rank=0):
    path = os.path.join(run_dir, "metrics", f"rank{rank}.jsonl")
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "step":
            out.append((rec["time_unix"], rec["step"]))
    return out


def wait_for(what, limit=300, every=0.5):
    deadline = time.time() + limit
    while time.time() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {limit} s")


def ranks_on(run_dir, attempt):
    rows = open(os.path.join(run_dir, "logs", f"attempt{attempt}", "ranks.tsv")).read().splitlines()
    return {int(r.split("\t")[0]): (r.split("\t")[1], int(r.split("\t")[2])) for r in rows}


def leftovers(fx, run_dir, nodes):
    """Processes of this job still alive on these nodes (their environment names its run directory)."""
    found = []
    needle = f"HPCLAUNCH_RUN_DIR={run_dir}".encode()
    for i in nodes:
        for pid in fx.node_pids(i):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append((i, pid, open(f"/proc/{pid}/cmdline", "rb").read()[:120]))
            except OSError:
                continue
    return found


def node_number(name):
    return int(name[1:])


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    path = tmp_path_factory.mktemp("digits") / "digits.csv"
    subprocess.run([sys.executable, "-m", "hpclaunch.train_entry.digits", str(path)], check=True)
    return str(path)


TRAIN = ["--epochs", "12", "--batch-size", "4", "--hidden", "256,256", "--log-every", "2", "--stop-check-every", "2",
         "--deterministic"]


def test_train_entry_survives_a_straggler_a_hang_and_a_dead_node_in_its_allocation(cluster3, revive, hpc_home,
                                                                                    tmp_path, digits):
    """One 2-node torchrun job of train_entry with a spare: a rank slowed to half speed is not killed;
    a rank SIGSTOPped is hung within its bound, its stacks saved, the step restarted; its node then
    dies, is fenced and the step restarts on the spare; the job completes with the final validation
    accuracy of an undisturbed run, no process of it is left on any node, and its goodput report's
    times add up to its wall time."""
    fx = cluster3
    ref = subprocess.run([os.path.join(os.path.dirname(sys.executable), "torchrun"), "--standalone",
                          "--nproc-per-node=2", "-m", "hpclaunch.train_entry", "--data", digits, *TRAIN,
                          "--run-dir", str(tmp_path / "ref")], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert ref.returncode == 0, ref.stdout[-2000:] + ref.stderr[-2000:]
    expected = json.load(open(tmp_path / "ref" / ".hpclaunch" / "finished"))["val_accuracy"]

    cmd = ", ".join(json.dumps(a) for a in ["python", "-m", "hpclaunch.train_entry", "--data", digits, *TRAIN])
    job_id, run_dir = submit(tmp_path, f"""
name: rec-train
profile: testcluster
launcher: torchrun
command: [{cmd}]
resources: {{nodes: 2, spare_nodes: 1, tasks_per_node: 1, cpus_per_task: 2, time: "00:20:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 5}}
recovery: {{heartbeat_timeout: 5, checkpoint_interval: 5, hang: {{floor: 10}}}}
slurm: {{exclusive: true}}
""")
    wait_for(lambda: len(steps(run_dir)) >= 5, 300)
    (attempt, nodes), = launches(run_dir)
    batch, other = nodes
    assert attempt == 0 and batch == "c1" and other in ("c2", "c3")
    spare = ({"c2", "c3"} - {other}).pop()
    rank, (host, pid) = [(r, v) for r, v in ranks_on(run_dir, 0).items() if v[0] == other][0]

    # a straggler: half of every second stopped, for 30 s: slower, never hung
    t_end = time.time() + 30
    while time.time() < t_end:
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.25)
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.25)
    assert len(launches(run_dir)) == 1 and not [line for line in state_lines(run_dir) if " verdict " in line]

    # a hang
    os.kill(pid, signal.SIGSTOP)
    stopped = time.time()
    verdict = wait_for(lambda: [line for line in state_lines(run_dir) if " verdict verdict=hang" in line], 300)[0]
    fields = dict(w.split("=", 1) for w in verdict.split()[3:])
    took = int(verdict.split()[0]) - stopped
    assert fields["rank"] == str(rank) and fields["node"] == other and fields["state"] == "T"
    assert took <= float(fields["bound_s"]) + 10, (took, fields)
    dump = open(os.path.join(fields["stacks"], f"rank{rank}.txt")).read()
    assert "State: T (stopped)" in dump and "Thread" in dump       # py-spy read it, stopped as it was

    # the node dies once the restarted step trains again
    wait_for(lambda: len(launches(run_dir)) == 2 and any(t > stopped + 1 for t, _ in steps(run_dir)), 300)
    assert launches(run_dir)[1][1] == nodes                          # a hang restarts on the same nodes
    before = max(s for _, s in steps(run_dir))
    revive.append(node_number(other))
    killed_at = time.time()
    assert fx.kill_node(node_number(other)) > 0
    st = wait_end(job_id, tmp_path, 900, run_dir, revive)
    assert st["state"] == "COMPLETED", st

    lines = state_lines(run_dir)
    assert any(f"fence node={other} reason=node" in line for line in lines), lines
    (a2, n2) = launches(run_dir)[2]
    assert n2 == [batch, spare] and all(other not in n for a, n in launches(run_dir)[2:])
    first_new = min(t for t, _ in steps(run_dir) if t > killed_at)
    assert first_new - killed_at <= 90, first_new - killed_at        # bench/goodput: p95 <= 45 s
    resumed = [json.loads(line) for line in open(os.path.join(run_dir, "metrics", "rank0.jsonl"))
               if '"header"' in line][-1]["resumed_step"]
    assert before - resumed <= 5 / 0.02 + 2 * 2                      # at most one interval of steps
    assert json.load(open(os.path.join(run_dir, ".hpclaunch", "finished")))["val_accuracy"] == expected
    assert leftovers(fx, run_dir, [i for i in range(1, NODES + 1) if i != node_number(other)]) == []

    # what the user reads (issue 45 item 2): each restart an attempt with its cause and its ranks' nodes
    causes = [(a["cause"], hostnames(a["nodes"])) for a in status(job_id, tmp_path)["attempt_history"]]
    assert causes[:2] == [(f"rank {rank} on {other} hung: hpclaunch restarted the step inside the allocation",
                           set(nodes)),
                          (f"node {other} failed (fenced): hpclaunch restarted the step inside the allocation",
                           set(nodes))], causes
    assert causes[-1] == ("completed", {batch, spare}), causes
    assert f"node {other} failed (fenced)" in hl("status", job_id, cwd=str(tmp_path)).stdout

    doc = json.loads(hl("report", job_id, "--goodput", "--format", "json", cwd=str(tmp_path)).stdout)
    assert sum(doc["seconds"].values()) == pytest.approx(doc["wall_s"], rel=0.01)
    assert [i["cause"] for i in doc["incidents"]] == ["hang", "node_failure"]
    assert doc["seconds"]["detecting"] > 0 and doc["seconds"]["recovering"] > 0 and doc["ettr"] > 0


@pytest.mark.parametrize("program,launcher,tasks", [("resumable_jax.py", "srun", 1), ("resumable_mpi.py", "mpi", 1)])
def test_a_program_under_srun_or_mpi_restarts_on_the_spare(cluster3, revive, hpc_home, tmp_path, program, launcher,
                                                           tasks):
    fx = cluster3
    job_id, run_dir = submit(tmp_path, f"""
name: rec-{launcher}
profile: testcluster
launcher: {launcher}
command: [python, {ROOT}/examples/{program}, "300", "0.1"]
resources: {{nodes: 2, spare_nodes: 1, tasks_per_node: {tasks}, cpus_per_task: 1, time: "00:15:00"}}
monitor: {{interval: 0}}
recovery: {{heartbeat_timeout: 5, checkpoint_interval: 5}}
slurm: {{exclusive: true}}
""")
    wait_for(lambda: len(steps(run_dir)) >= 10, 300)
    (_, nodes), = launches(run_dir)
    other = nodes[1]
    before = max(s for _, s in steps(run_dir))
    revive.append(node_number(other))
    killed_at = time.time()
    assert fx.kill_node(node_number(other)) > 0
    st = wait_end(job_id, tmp_path, 900, run_dir, revive)
    assert st["state"] == "COMPLETED", st
    assert [n for _, n in launches(run_dir)][1] == [nodes[0], ({"c2", "c3"} - {other}).pop()]
    first_new = min(t for t, _ in steps(run_dir) if t > killed_at)
    assert first_new - killed_at <= 90
    resumed = [json.loads(line) for line in open(os.path.join(run_dir, "metrics", "rank0.jsonl"))
               if '"header"' in line][-1]["resumed_step"]
    assert before - resumed <= 5 / 0.1 + 10
    result = json.load(open(os.path.join(run_dir, "result.json")))
    # the same result as a run that never stopped (deterministic: float sums in a fixed order)
    ref = subprocess.run([sys.executable, "-c", REFERENCE[program]], capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr
    assert result == json.loads(ref.stdout)
    assert leftovers(fx, run_dir, [i for i in range(1, NODES + 1) if i != node_number(other)]) == []


# The program's arithmetic in one process, numpy alone: what any run of it, stopped or not, must end with.
# JAX gathers float32 on CPU (x64 off): its reference rounds the same way.
_REF = """
import json, numpy as np
DIM, ROWS, LR, STEPS, n = 64, 4096, 0.05, 300, 2
rng = np.random.default_rng(0)
x = rng.standard_normal((ROWS, DIM)); y = x @ rng.standard_normal(DIM) + 0.01 * rng.standard_normal(ROWS)
shards = [(x[r::n], y[r::n]) for r in range(n)]
w = np.zeros(DIM)
for step in range(1, STEPS + 1):
    g = np.stack([np.append(xs.T @ (xs @ w - ys) / len(ys), 0.0) for xs, ys in shards]).astype(DTYPE)
    w = w - LR * g[:, :DIM].mean(axis=0)
xs, ys = shards[0]
print(json.dumps({"step": STEPS, "loss": round(float(np.mean((xs @ w - ys) ** 2)), 12), "w_sum": round(float(w.sum()), 12)}))
"""
REFERENCE = {"resumable_jax.py": "DTYPE = 'float32'\n" + _REF, "resumable_mpi.py": "DTYPE = 'float64'\n" + _REF}


def submit_wait(tmp_path, text):
    """`submit --wait` running: (its process, the run directory once the batch script made it)."""
    job = tmp_path / "job.yaml"
    job.write_text(text)
    proc = subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", str(job), "--backend", "slurm", "--wait"],
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found = wait_for(lambda: [str(p.parent.parent) for p in tmp_path.glob("runs/*/.hpclaunch/state")], 300)
    return proc, found[0]


def hostnames(text):
    """Slurm's node list (c[1,3]) or hpclaunch's (c1,c3) as a set of names."""
    out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True)
    return set(out.stdout.split())


def progress_lines(stderr):
    return [line for line in stderr.splitlines() if re.match(r"\s+\[\s*\d+ s\] [A-Z_]+\b.* attempt \d+", line)]


def said_everywhere(tmp_path, run_dir, proc, cause, nodes, state=None):
    """The node failure in what the user reads (issue 45 item 2): --wait's lines, status (text and
    JSON: attempt 0 with its cause, state and nodes) and the report (JSON and text)."""
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    assert any(f"attempt 0 ended: {cause}" in line for line in progress_lines(err)), err[-3000:]
    st = json.loads(hl("status", run_dir, "--json", cwd=str(tmp_path)).stdout)
    first = st["attempt_history"][0]
    assert st["state"] == "COMPLETED" and st["attempts"] >= 2, st
    assert cause in first["cause"] and hostnames(first["nodes"]) == nodes, first
    assert state is None or first["state"] == state, first
    text = hl("status", run_dir, cwd=str(tmp_path)).stdout
    assert "attempt 0: " in text and cause in text, text
    doc = json.loads(hl("report", run_dir, "--format", "json", cwd=str(tmp_path)).stdout)
    assert cause in doc["attempt_history"][0]["cause"] and doc["job"]["attempts"] >= 2, doc["attempt_history"]
    assert cause in hl("report", run_dir, "--format", "text", cwd=str(tmp_path)).stdout
    return st


def test_without_a_spare_the_job_is_requeued_without_the_dead_node(cluster3, revive, hpc_home, tmp_path):
    fx = cluster3
    proc, run_dir = submit_wait(tmp_path, f"""
name: rec-requeue
profile: testcluster
launcher: mpi
command: [python, {ROOT}/examples/resumable_mpi.py, "200", "0.1"]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:15:00"}}
monitor: {{interval: 0}}
recovery: {{heartbeat_timeout: 5, checkpoint_interval: 5}}
slurm: {{exclusive: true}}
""")
    wait_for(lambda: len(steps(run_dir)) >= 10, 300)
    (_, nodes), = launches(run_dir)
    other = nodes[1]
    revive.append(node_number(other))
    assert fx.kill_node(node_number(other)) > 0
    wait_for(lambda: any(re.search(r" end rc=\S+ outcome=completed", line) for line in state_lines(run_dir)), 900)
    fx.revive_node(revive.pop())
    lines = state_lines(run_dir)
    assert any(f"outcome=requeued reason=node exclude={other}" in line for line in lines), lines
    assert all(other not in n for _, n in launches(run_dir)[1:]) and len(launches(run_dir)) >= 2
    said_everywhere(tmp_path, run_dir, proc, f"node {other} failed (fenced)", {"c1", other})


def test_today_s_path_a_node_failure_slurm_requeued_is_in_what_the_user_reads(cluster3, revive, hpc_home,
                                                                               tmp_path):
    """recovery off: Slurm notices the dead node (SlurmdTimeout), the job ends NODE_FAIL and Slurm
    requeues it; --wait, status and the report name attempt 0's cause and its nodes."""
    fx = cluster3
    proc, run_dir = submit_wait(tmp_path, f"""
name: rec-nodefail
profile: testcluster
launcher: srun
command: [python, {ROOT}/examples/resumable_jax.py, "300", "0.1"]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:15:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 3}}
recovery: {{enabled: false, checkpoint_interval: 5}}
slurm: {{exclusive: true}}
""")
    wait_for(lambda: len(steps(run_dir)) >= 10, 300)
    hosts = sorted({h for h, _ in ranks_on(run_dir, 0).values()})
    other = [h for h in hosts if h != "c1"][0] if "c1" in hosts else hosts[1]
    revive.append(node_number(other))
    assert fx.kill_node(node_number(other)) > 0
    wait_for(lambda: any(re.search(r" end rc=\S+ outcome=completed", line) for line in state_lines(run_dir)), 900)
    fx.revive_node(revive.pop())
    st = said_everywhere(tmp_path, run_dir, proc, "a node failed", set(hosts), "NODE_FAIL")
    assert other not in ",".join(sorted({h for h, _ in ranks_on(run_dir, st["attempts"] - 1).values()}))
