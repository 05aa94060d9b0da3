"""The whole job lifecycle on the real Slurm test cluster (2 nodes in network namespaces)."""
import json
import os
import subprocess
import sys
import time

import pytest
from hlcli import hl, job_file

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def submit_json(tmp_path, job, *extra):
    proc = hl("submit", job, "--backend", "slurm", "--json", *extra, cwd=str(tmp_path))
    return json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])


def status_json(job_id):
    return json.loads(hl("status", job_id, "--json", cwd="/").stdout)


def wait_for(job_id, done, timeout=60, poll=0.5):
    """Poll `hpclaunch status JOB --json` until done(status); returns every status seen, the last one last."""
    seen = [status_json(job_id)]
    deadline = time.time() + timeout
    while not done(seen[-1]) and time.time() < deadline:
        time.sleep(poll)
        seen.append(status_json(job_id))
    return seen


def test_torchrun_two_nodes_two_ranks(slurm, hpc_home, tmp_path):
    job = job_file(tmp_path, f"""
name: ddp two nodes
profile: testcluster
launcher: torchrun
command: [python, {EXAMPLES}/ddp_check.py, "30"]
resources: {{nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 0.5}}
""")
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), timeout=300)
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    logs = {r: open(os.path.join(run_dir, "logs", "attempt0", f"rank{r}.log")).read() for r in range(4)}
    hosts = {r: logs[r].split(" host ")[1].split()[0] for r in range(4)}
    assert hosts == {0: "c1", 1: "c1", 2: "c2", 3: "c2"}, hosts
    assert "params identical: True" in logs[0]
    # one monitor per node, rows for both hosts, and no monitor left running after the job
    assert sorted(f for f in os.listdir(os.path.join(run_dir, "monitor")) if f.endswith(".host.csv")) == \
        ["c1.host.csv", "c2.host.csv"]
    assert subprocess.run(["pgrep", "-f", f"hpclaunch.monitors.*{run_dir}"], capture_output=True).returncode == 1
    st = json.loads(hl("status", "ddp two nodes", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0


def test_mpi_two_nodes(slurm, hpc_home, tmp_path):
    job = job_file(tmp_path, f"""
name: mpi-allreduce
profile: testcluster
launcher: mpi
command: [python, {EXAMPLES}/mpi_allreduce.py]
resources: {{nodes: 2, tasks_per_node: 2, time: "00:03:00"}}
monitor: {{interval: 0}}
""")
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path))
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    out = [open(os.path.join(run_dir, "logs", "attempt0", f"rank{r}.log")).read() for r in range(4)]
    assert all("sum 10 ok" in o for o in out), out
    assert {o.split(" host ")[1].split()[0] for o in out} == {"c1", "c2"}


def test_status_states_cancel_and_logs(slurm, hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: sleeper
profile: testcluster
launcher: srun
command: [bash, -c, "echo started; sleep 300"]
resources: {nodes: 1, tasks_per_node: 1, time: "00:10:00"}
monitor: {interval: 0}
""")
    sub = submit_json(tmp_path, job)
    seen = set()
    deadline = time.time() + 60
    while time.time() < deadline:
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        seen.add(st["state"])
        if st["state"] == "RUNNING":
            break
        time.sleep(0.3)
    assert "RUNNING" in seen
    time.sleep(1)
    assert "started" in hl("logs", "sleeper", cwd="/").stdout
    hl("cancel", sub["job_id"], cwd="/")
    deadline = time.time() + 60
    while time.time() < deadline:
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        if st["state"] not in ("RUNNING", "COMPLETING", "PENDING"):
            break
        time.sleep(0.5)
    assert st["state"] == "CANCELLED", st
    listing = json.loads(hl("list", "--all", "--json", cwd="/").stdout)
    assert [r["state"] for r in listing if r["job_id"] == sub["job_id"]] == ["CANCELLED"]


def test_dependency_chain(slurm, hpc_home, tmp_path):
    first = job_file(tmp_path, """
name: first
profile: testcluster
launcher: srun
command: [bash, -c, "sleep 6; date +%s.%N"]
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
""", "first.yaml")
    second = job_file(tmp_path, """
name: second
profile: testcluster
launcher: srun
command: [bash, -c, "date +%s.%N"]
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
""", "second.yaml")
    a = submit_json(tmp_path, first)
    b = submit_json(tmp_path, second, "--after", "first:afterok")
    # while `first` sleeps, `second` waits on it (the reason can read None until the scheduler's next pass)
    seen = wait_for(b["job_id"], lambda st: st["reason"] == "Dependency", timeout=5, poll=0.2)
    assert {st["state"] for st in seen} == {"PENDING"} and seen[-1]["reason"] == "Dependency", seen
    hl("submit", second, "--backend", "slurm", "--after", a["job_id"], "--wait", cwd=str(tmp_path))
    for _ in range(60):
        if json.loads(hl("status", b["job_id"], "--json", cwd="/").stdout)["state"] == "COMPLETED":
            break
        time.sleep(0.5)
    end_a = float(open(os.path.join(a["run_dir"], "logs", "attempt0", "rank0.log")).read())
    start_b = float(open(os.path.join(b["run_dir"], "logs", "attempt0", "rank0.log")).read())
    assert start_b > end_a


def test_preflight_failures_queue_nothing(slurm, hpc_home, tmp_path):
    # A profile that knows nothing of this cluster's limits, so the live preflight must catch them.
    (tmp_path / "hpc_profiles").mkdir()
    (tmp_path / "hpc_profiles" / "open.yaml").write_text(
        "name: open\nextends: testcluster\nnode: {cpus: 64, mem: 1000G}\n"
        "limits: {partitions: [], max_time: null, max_nodes: null}\n")
    base = """
name: preflight
profile: open
launcher: srun
command: [hostname]
monitor: {interval: 0}
"""
    cases = [
        ("slurm: {partition: nosuch}\nresources: {nodes: 1, tasks_per_node: 1}\n",
         "slurm.partition: no such partition on cluster"),
        ("resources: {nodes: 1, tasks_per_node: 8, cpus_per_task: 1}\n",
         "resources.cpus_per_task: needs 8 CPUs per node; nodes of partition 'debug' have at most 4"),
        ("resources: {nodes: 1, tasks_per_node: 1, time: '02:00:00'}\n",
         "resources.time: over partition 'debug''s MaxTime of 01:00:00"),
        ("resources: {nodes: 3, tasks_per_node: 1}\n", "resources.nodes: partition 'debug' has 2 node(s)"),
        ("slurm: {account: nobody}\nresources: {nodes: 1, tasks_per_node: 1}\n",
         "slurm.account: you have no association with account 'nobody'"),
        ("slurm: {qos: nosuchqos}\nresources: {nodes: 1, tasks_per_node: 1}\n", "slurm.qos"),
    ]
    before = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout
    for text, words in cases:
        proc = hl("submit", job_file(tmp_path, base + text), "--backend", "slurm", cwd=str(tmp_path), check=False)
        assert proc.returncode == 2, (text, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert words in proc.stderr, proc.stderr
    # A request only Slurm can judge (an unknown node feature): the held sbatch is refused, so
    # nothing is queued or recorded, as with --test-only.
    proc = hl("submit", job_file(tmp_path, base + "resources: {nodes: 1, tasks_per_node: 1}\n"
                                 "slurm: {constraint: nosuchfeature}\n"),
              "--backend", "slurm", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "sbatch" in proc.stderr and "feature" in proc.stderr.lower(), proc.stderr
    # --test-only: the checks plus Slurm's own verdict, and nothing queued either.
    ok = job_file(tmp_path, base + "resources: {nodes: 2, tasks_per_node: 1}\n")
    proc = hl("submit", ok, "--backend", "slurm", "--test-only", "--json", cwd=str(tmp_path))
    out = json.loads(proc.stdout)
    assert out["queued"] is False and "to start at" in out["sbatch_test_only"], out
    proc = hl("submit", job_file(tmp_path, base + "resources: {nodes: 1, tasks_per_node: 1, time: '02:00:00'}\n"),
              "--test-only", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "MaxTime" in proc.stderr, proc.stderr
    assert subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout == before
    assert json.loads(hl("list", "--all", "--json", cwd="/").stdout) == []
    assert not (tmp_path / "runs").exists()


def test_controller_down_is_a_clear_error(slurm, hpc_home, tmp_path, monkeypatch):
    job = job_file(tmp_path, "name: nope\nprofile: testcluster\nlauncher: srun\ncommand: [hostname]\n"
                             "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n")
    subprocess.run(["scontrol", "shutdown", "slurmctld"], check=True, capture_output=True)
    try:
        for _ in range(50):
            if subprocess.run(["scontrol", "ping"], capture_output=True).returncode != 0:
                break
            time.sleep(0.2)
        env = dict(os.environ, HPCLAUNCH_SLURM_RETRIES="2", HPCLAUNCH_SLURM_RETRY_DELAY="0.1")
        proc = hl("submit", job, "--backend", "slurm", check=False, cwd=str(tmp_path), env=env, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "controller" in proc.stderr.lower(), proc.stderr
        assert json.loads(hl("list", "--all", "--json", cwd="/").stdout) == []
        assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")
    finally:
        subprocess.run(["slurmctld"], check=True)
        for _ in range(100):
            if subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout.count("UP"):
                break
            time.sleep(0.2)
        for _ in range(100):
            idle = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout
            if idle.strip() and all(s in ("idle", "mixed", "allocated") for s in idle.split()):
                break
            time.sleep(0.3)


def test_array_of_50_with_parallelism_10(slurm, hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: sweep50
profile: testcluster
launcher: srun
command: [bash, -c, "echo point {i} x={x}; echo $(date +%s.%N) start >> $HPCLAUNCH_RUN_DIR/../starts; sleep 1; echo $(date +%s.%N) end >> $HPCLAUNCH_RUN_DIR/../starts"]
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 1}
monitor: {interval: 0}
requeue: {max_attempts: 1}
sweep:
  parameters:
    i: {range: [0, 25]}
    x: [a, b]
  parallelism: 10
""")
    sub = submit_json(tmp_path, job)
    seen_running = 0
    deadline = time.time() + 240
    while time.time() < deadline:
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        seen_running = max(seen_running, st["tasks"].get("RUNNING", 0))
        if st["state"] in ("COMPLETED", "FAILED"):
            break
        time.sleep(0.5)
    assert st["state"] == "COMPLETED" and st["tasks"] == {"COMPLETED": 50}, st
    assert seen_running <= 10
    points = set()
    for t in range(50):
        out = open(os.path.join(sub["run_dir"], f"task{t}", "logs", "attempt0", "rank0.log")).read()
        points.add(out.split("\n")[0])
    assert len(points) == 50 and "point 24 x=b" in points
    proc = hl("logs", sub["job_id"], "--task", "7", cwd="/")
    assert "==> task 7 rank 0" in proc.stdout and "point 3 x=b" in proc.stdout, proc.stdout
    assert "sweep of 50 task(s): 0 failed; showing task 49" in hl("logs", sub["job_id"], cwd="/").stderr
    # never more than 10 at once, measured from the tasks' own start/end stamps
    events = []
    for line in open(os.path.join(sub["run_dir"], "starts")).read().split("\n"):
        if line:
            t, kind = line.split()
            events.append((float(t), 1 if kind == "start" else -1))
    running = peak = 0
    for _, d in sorted(events):
        running += d
        peak = max(peak, running)
    assert peak <= 10


def test_sweep_larger_than_max_array_size_is_split(slurm, hpc_home, tmp_path):
    # The test cluster's MaxArraySize is 1001: 1,200 points become two arrays with one run folder.
    job = job_file(tmp_path, """
name: bigsweep
profile: testcluster
launcher: srun
command: [bash, -c, "echo {i}"]
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
requeue: {max_attempts: 1}
sweep:
  parameters: {i: {range: [0, 1200]}}
  parallelism: 4
""")
    sub = submit_json(tmp_path, job)
    try:
        chunks = [r for r in json.loads(hl("list", "--all", "--json", cwd="/").stdout) if r["name"] == "bigsweep"]
        assert sorted(r["array_size"] for r in chunks) == [199, 1001]
        assert {r["run_dir"] for r in chunks} == {sub["run_dir"]}
        # %4 holds per array, so the second waits for the first: never more than 4 tasks at once
        first, second = sorted((r["job_id"] for r in chunks), key=int)
        show = subprocess.run(["scontrol", "show", "job", second], capture_output=True, text=True).stdout
        assert f"Dependency=afterany:{first}_*" in show or f"Dependency=afterany:{first}(" in show, show
        running = subprocess.run(["squeue", "-h", "-r", "-t", "RUNNING", "-j", f"{first},{second}", "-o", "%i"],
                                 capture_output=True, text=True).stdout.split()
        assert len(running) <= 4 and not any(j.startswith(second + "_") for j in running), running
        # ending the first array (afterany) starts the second, whose tasks count on from 1001 into
        # the same folder
        subprocess.run(["scancel", first], check=True)
        deadline = time.time() + 120
        while time.time() < deadline and not os.path.exists(
                os.path.join(sub["run_dir"], "task1001", "logs", "attempt0", "rank0.log")):
            time.sleep(0.5)
        log = os.path.join(sub["run_dir"], "task1001", "logs", "attempt0", "rank0.log")
        for _ in range(40):
            if os.path.exists(log) and open(log).read().strip():
                break
            time.sleep(0.5)
        assert open(log).read().strip() == "1001"
    finally:
        for r in json.loads(hl("list", "--all", "--json", cwd="/").stdout):
            if r["name"] == "bigsweep":
                subprocess.run(["scancel", r["job_id"]])


def test_node_failure_recovers_without_the_node(hpc_home, tmp_path, cluster_control):
    """A 2-node job on a 3-node cluster loses a node mid-run (every process in that node's namespace
    is killed, and the node marked DOWN, as a health check would): the job comes back on the other
    nodes and resumes from its checkpoint. Slurm requeues it (hpclaunch asked for --requeue); where
    Slurm does not, `hpclaunch submit --wait` resubmits it with --exclude (Job.wait)."""
    cluster_fixture = cluster_control
    cluster_fixture.cluster_available_or_skip()
    os.environ.update(cluster_fixture.ensure_cluster(nodes=3))
    try:
        data = tmp_path / "digits.csv"
        subprocess.run([sys.executable, "-m", "hpclaunch.train_entry.digits", str(data)], check=True,
                       capture_output=True)
        job = job_file(tmp_path, f"""
name: survive-node-loss
profile: testcluster
launcher: torchrun
command: [python, -m, hpclaunch.train_entry, --data, {data}, --epochs, "300", --batch-size, "16",
          --dist-timeout, "30", --quiet]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:10:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 3}}
""")
        sub = submit_json(tmp_path, job)
        ckpt = os.path.join(sub["run_dir"], "checkpoints")
        deadline = time.time() + 180
        while time.time() < deadline and not any(n.startswith("step-") for n in os.listdir(ckpt)):
            time.sleep(0.5)
        assert any(n.startswith("step-") for n in os.listdir(ckpt)), "no checkpoint before the node loss"
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        assert st["state"] == "RUNNING" and st["nodes"], st
        victim = subprocess.run(["scontrol", "show", "hostnames", st["nodes"]], capture_output=True,
                                text=True).stdout.split()[1]
        # The node dies: slurmd, step daemons and ranks alike.
        pids = subprocess.run(["ip", "netns", "pids", "sn" + victim[1:]], capture_output=True, text=True).stdout.split()
        assert pids
        subprocess.run(["kill", "-9", *pids])
        subprocess.run(["scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=node died"], check=True)
        proc = subprocess.run([sys.executable, "-c",
                               "import sys; from hpclaunch.runs.jobs import find_job; j = find_job(sys.argv[1]);"
                               "st = j.wait(poll=1); print(j.id, st.state, st.nodes or '-', st.attempts)",
                               sub["job_id"]], capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        job_id, state, nodes, attempts = proc.stdout.split()
        assert state == "COMPLETED" and int(attempts) >= 2, proc.stdout
        ran_on = open(os.path.join(sub["run_dir"], ".hpclaunch", "state")).read().strip().splitlines()
        assert "outcome=completed" in ran_on[-1]
        last_start = [line for line in ran_on if " start " in line][-1]
        assert last_start.split("attempt=")[1].split()[0] != "0"
        header = [json.loads(line) for line in open(os.path.join(sub["run_dir"], "metrics", "rank1.jsonl"))
                  if '"kind":"header"' in line][-1]
        assert header["host"] != victim and header["resumed_step"] > 0, header   # resumed from a checkpoint
        final = [json.loads(line) for line in open(os.path.join(sub["run_dir"], "metrics", "rank0.jsonl"))
                 if '"kind":"epoch"' in line][-1]
        assert final["epoch"] == 299 and final["val_accuracy"] >= 0.95
    finally:
        os.environ.update(cluster_fixture.ensure_cluster(nodes=2))


def test_status_without_accounting(hpc_home, tmp_path, cluster_control):
    """With slurmdbd off (sacct disabled), status still follows a job to its end through scontrol."""
    cluster_fixture = cluster_control
    cluster_fixture.cluster_available_or_skip()
    os.environ.update(cluster_fixture.ensure_cluster(nodes=2, accounting="none"))
    try:
        assert subprocess.run(["sacct", "-n"], capture_output=True).returncode != 0   # really disabled
        job = job_file(tmp_path, "name: no-acct\nprofile: testcluster\nlauncher: srun\ncommand: [bash, -c, 'exit 4']\n"
                                 "resources: {nodes: 1, tasks_per_node: 1}\nmonitor: {interval: 0}\n"
                                 "requeue: {max_attempts: 1}\n")
        proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False)
        assert proc.returncode == 4, proc.stderr
        st = json.loads(hl("status", "no-acct", "--json", cwd="/").stdout)
        assert st["state"] == "FAILED" and st["exit_code"] == 4 and st["source"] == "scontrol", st
    finally:
        os.environ.update(cluster_fixture.ensure_cluster(nodes=2))


def test_a_job_held_by_its_begin_time_is_pending_until_cancelled(slurm, hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: later
profile: testcluster
launcher: srun
command: [bash, -c, "echo started"]
resources: {nodes: 1, tasks_per_node: 1, time: "00:05:00"}
monitor: {interval: 0}
""")
    sub = submit_json(tmp_path, job, "-o", "slurm.extra=[--begin=now+600]")
    seen = wait_for(sub["job_id"], lambda st: st["reason"] == "BeginTime", timeout=20)
    assert {st["state"] for st in seen} == {"PENDING"} and seen[-1]["reason"] == "BeginTime", seen
    out = hl("status", sub["job_id"], cwd="/").stdout
    assert "PENDING" in out and "(BeginTime: its start time has not come yet; expected to start " in out, out
    hl("cancel", sub["job_id"], cwd="/")
    st = wait_for(sub["job_id"], lambda st: st["state"] != "PENDING")[-1]
    assert st["state"] == "CANCELLED", st
    assert not os.path.exists(os.path.join(sub["run_dir"], "logs", "attempt0"))   # it never started
    listing = json.loads(hl("list", "--all", "--json", cwd="/").stdout)
    assert [r["state"] for r in listing if r["job_id"] == sub["job_id"]] == ["CANCELLED"]


def test_afterok_on_a_failed_job_never_starts(slurm, hpc_home, tmp_path):
    """Without kill_invalid_depend (the test cluster sets no DependencyParameters), Slurm keeps a job whose
    afterok dependency failed PENDING for ever, with reason DependencyNeverSatisfied; status must show it."""
    first = job_file(tmp_path, """
name: fails
profile: testcluster
launcher: srun
command: [bash, -c, "sleep 3; false"]
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
requeue: {max_attempts: 1}
""", "fails.yaml")
    second = job_file(tmp_path, """
name: after-fails
profile: testcluster
launcher: srun
command: [bash, -c, "echo started"]
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
""", "after.yaml")
    a = submit_json(tmp_path, first)
    b = submit_json(tmp_path, second, "--after", f"{a['job_id']}:afterok")
    st = wait_for(a["job_id"], lambda st: st["state"] not in ("PENDING", "RUNNING", "COMPLETING"), timeout=90)[-1]
    assert st["state"] == "FAILED" and st["exit_code"] == 1, st
    seen = wait_for(b["job_id"], lambda st: "DependencyNeverSatisfied" in (st["reason"] or ""), timeout=60)
    assert {st["state"] for st in seen} == {"PENDING"}, seen
    assert "DependencyNeverSatisfied" in seen[-1]["reason"], seen[-1]
    hl("cancel", b["job_id"], cwd="/")
    st = wait_for(b["job_id"], lambda st: st["state"] != "PENDING")[-1]
    assert st["state"] == "CANCELLED", st
    assert not os.path.exists(os.path.join(b["run_dir"], "logs", "attempt0"))   # it never started


def test_secrets_in_the_environment_stay_out_of_the_run_directory(slurm, hpc_home, tmp_path, files_containing):
    """A secret exported by name reaches the job through Slurm's environment, never a file of ours."""
    secret = f"s3cr3t-value-{os.getpid()}-{time.time_ns()}"
    job = job_file(tmp_path, """
name: secretive
profile: testcluster
launcher: srun
command: [bash, -c, 'test -n "$MY_API_TOKEN" && echo present || echo absent']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
requeue: {max_attempts: 1}
""")
    env = dict(os.environ, MY_API_TOKEN=secret)
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), env=env)
    run_dir = [line.split(": ", 1)[1].strip() for line in proc.stdout.splitlines() if "run directory" in line][0]
    assert secret not in proc.stdout + proc.stderr
    assert open(os.path.join(run_dir, "logs", "attempt0", "rank0.log")).read().strip() == "present"
    # the run directory (script, job.yaml, logs, state) and the registry
    assert files_containing(secret, tmp_path, hpc_home) == []
    assert os.path.exists(os.path.join(run_dir, "logs", "slurm.out"))   # the batch log was searched too
    logs = hl("logs", "secretive", cwd="/").stdout
    assert "present" in logs and secret not in logs
