"""The local backend: the same script as a one-node allocation, with the registry, status, logs,
cancel, the time limit and requeue, and no Slurm at all."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from copies import copy_meta
from hlcli import hl, job_file

from hpclaunch.reports import columnar


def test_submit_wait_status_logs(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: local hello
launcher: srun
command: [bash, -c, 'echo "rank $SLURM_PROCID of $SLURM_NTASKS job $SLURM_JOB_ID"; sleep 2; [ "$SLURM_PROCID" = 1 ] && exit 3; sleep 0.5']
resources: {nodes: 1, tasks_per_node: 2}
monitor: {interval: 0.2}
""")
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False)
    assert proc.returncode == 3, proc.stderr           # the job's exit code
    st = json.loads(hl("status", "local hello", "--json", cwd="/").stdout)
    assert st["state"] == "FAILED" and st["exit_code"] == 3
    # the host by the name the ranks and the monitor give it, not "localhost"
    ranks_tsv = open(os.path.join(st["run_dir"], "logs", "attempt0", "ranks.tsv")).read().split()
    assert st["nodes"] == socket.gethostname() == ranks_tsv[1], (st["nodes"], ranks_tsv)
    logs = hl("logs", st["job_id"], cwd="/").stdout
    assert logs.index("==> rank 1 (exit 3)") < logs.index("==> rank 0")   # the failing rank first
    assert "rank 1 of 2 job " + st["job_id"] in logs
    mon = os.path.join(st["run_dir"], "monitor")
    assert any(f.endswith(".host.csv") for f in os.listdir(mon))
    rows = json.loads(hl("list", "--all", "--json", cwd="/").stdout)
    assert [r["state"] for r in rows] == ["FAILED"] and rows[0]["job_sha256"]


def start_one_rank(tmp_path, name, command):
    """Submit a one-rank local job without a monitor running `bash -c COMMAND`; submit's JSON."""
    job = job_file(tmp_path, f"""
name: {name}
launcher: srun
command: [bash, -c, '{command}']
resources: {{nodes: 1, tasks_per_node: 1}}
monitor: {{interval: 0}}
""")
    return json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)


def test_cancel(hpc_home, tmp_path):
    sub = start_one_rank(tmp_path, "long", "echo up; sleep 120")
    for _ in range(100):
        if json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)["state"] == "RUNNING":
            break
        time.sleep(0.1)
    time.sleep(0.5)
    hl("cancel", "long", cwd="/")
    for _ in range(150):
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        if st["state"] != "RUNNING":
            break
        time.sleep(0.1)
    assert st["state"] == "CANCELLED"
    assert subprocess.run(["pgrep", "-f", "sleep 120"], capture_output=True).returncode == 1


def test_time_limit_signal_requeue_and_resume(hpc_home, tmp_path):
    """Local parity with Slurm: the requeue signal before the limit, the ranks' sentinel, a new attempt."""
    script = tmp_path / "count.sh"
    script.write_text("""#!/bin/bash
state=$HPCLAUNCH_RUN_DIR/checkpoints/step
n=$(cat "$state" 2>/dev/null || echo 0)
echo "attempt $HPCLAUNCH_ATTEMPT starts at $n"
while [ "$n" -lt 8 ]; do
  if [ -e "$HPCLAUNCH_REQUEUE_FLAG" ]; then echo "saving at $n"; echo "$n" > "$state"; exit "$HPCLAUNCH_REQUEUE_EXIT"; fi
  n=$((n + 1)); sleep 1
done
echo "$n" > "$state"; echo done
""")
    script.chmod(0o755)
    job = job_file(tmp_path, f"""
name: requeue me
launcher: srun
command: [{script}]
resources: {{nodes: 1, tasks_per_node: 1, time: "00:05"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 3, grace: 2}}
""")
    # A 5-second limit with the signal 2 s before: the first attempt must stop early and requeue.
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), timeout=120, check=False)
    st = json.loads(hl("status", "requeue me", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["attempts"] >= 2, st
    assert proc.returncode == 0, proc.stderr  # a job that requeued, then completed, exits 0
    first = open(os.path.join(st["run_dir"], "logs", "attempt0", "rank0.log")).read()
    second = open(os.path.join(st["run_dir"], "logs", "attempt1", "rank0.log")).read()
    assert "saving at" in first and "starts at 0" in first
    assert "starts at 0" not in second
    assert open(os.path.join(st["run_dir"], "checkpoints", "step")).read().strip() == "8"


def test_a_rank_asking_for_requeue_under_torchrun_requeues_the_job(hpc_home, tmp_path):
    """torchrun reports a rank's exit 75 as its own 1; train_entry's marker still gets the job
    requeued (no signal reached the batch shell here), and the next attempt resumes."""
    from hpclaunch.train_entry.digits import write_digits_csv

    data = tmp_path / "digits.csv"
    write_digits_csv(str(data))
    job = job_file(tmp_path, f"""
name: rank requeue
launcher: torchrun
command: [{sys.executable}, -m, hpclaunch.train_entry, --data, {data}, --epochs, "1", --stop-after-step, "3"]
resources: {{nodes: 1, tasks_per_node: 2, time: "00:05:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 3}}
""")
    hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), timeout=240)
    st = json.loads(hl("status", "rank requeue", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["attempts"] == 2, st
    ends = [line.split()[1:] for line in open(os.path.join(st["run_dir"], ".hpclaunch", "state")) if " end " in line]
    assert ends == [["attempt=0", "end", "rc=1", "outcome=requeued"], ["attempt=1", "end", "rc=0", "outcome=completed"]]
    second = open(os.path.join(st["run_dir"], "logs", "attempt1", "rank0.log")).read()
    assert "resuming from" in second and "step-3" in second, second[-3000:]


def test_nodes_over_one_is_refused(hpc_home, tmp_path):
    job = job_file(tmp_path, "name: two\nprofile: testcluster\nlauncher: srun\ncommand: [hostname]\n")
    proc = hl("submit", job, "--backend", "local", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "resources.nodes: the local backend runs one node" in proc.stderr
    assert json.loads(hl("list", "--all", "--json", cwd="/").stdout) == []


def test_report_of_a_local_job_and_the_fleet(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: reported
launcher: srun
command: [bash, -c, 'sleep 2']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0.25}
""")
    sub = json.loads(hl("submit", job, "--backend", "local", "--wait", "--json", cwd=str(tmp_path)).stdout)
    # the job script's accounting step ran at its end, as on Slurm: the log has a valid columnar copy
    # before any report, and the first report reads it (not rewritten)
    log = next(os.path.join(sub["run_dir"], "monitor", f) for f in os.listdir(os.path.join(sub["run_dir"], "monitor"))
               if f.endswith(".host.csv"))
    meta = copy_meta(log)
    assert meta["format"] == columnar.FORMAT and meta["source"] == columnar.identity(os.stat(log)), meta
    copied = os.stat(columnar.copy_path(log)).st_mtime_ns
    rep = json.loads(hl("report", "reported", "--format", "json", cwd="/").stdout)
    assert os.stat(columnar.copy_path(log)).st_mtime_ns == copied
    assert rep["schema"] == "hpclaunch.report/1"
    assert rep["energy_j"]["cpu"] is None and rep["energy_j"]["gpu"] is None   # nothing measurable here: null
    assert any("RAPL" in w for w in rep["warnings"])
    assert rep["nodes"] and rep["nodes"][0]["host"]
    out = tmp_path / "r.html"
    hl("report", "reported", "-o", str(out), cwd="/")
    assert out.read_text().lstrip().lower().startswith("<!doctype html")
    fleet = hl("report", "--since", "1d", "--format", "json", cwd="/").stdout
    assert "reported" in fleet
    bad = hl("report", "no-such-job", cwd="/", check=False)
    assert bad.returncode == 2 and "not in the registry" in bad.stderr


def test_local_sweep_runs_every_point_and_logs_show_the_failed_task(hpc_home, tmp_path, loose_umask):
    # The `local` profile's node has 2 CPUs: with 1 CPU a task, 2 run side by side (parallelism 3 is capped).
    job = job_file(tmp_path, """
name: local sweep
launcher: srun
command: [bash, -c, 'echo "point {lr} task $HPCLAUNCH_SWEEP_INDEX start $(date +%s.%N)"; sleep 1; [ {lr} = 0.3 ] && exit 4; echo "end $(date +%s.%N)"']
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 1}
monitor: {interval: 0}
sweep:
  parameters: {lr: [0.1, 0.2, 0.3, 0.4, 0.5]}
  parallelism: 3
""")
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False)
    assert proc.returncode == 4, proc.stderr
    st = json.loads(hl("status", "local sweep", "--json", cwd="/").stdout)
    assert st["state"] == "FAILED" and st["tasks"] == {"COMPLETED": 4, "FAILED": 1}, st
    run_dir = st["run_dir"]
    starts = []
    for t, lr in enumerate(["0.1", "0.2", "0.3", "0.4", "0.5"]):
        text = open(os.path.join(run_dir, f"task{t}", "logs", "attempt0", "rank0.log")).read()
        assert text.startswith(f"point {lr} task {t} start "), text
        starts.append(float(text.split()[5]))
        assert os.path.exists(os.path.join(run_dir, "logs", f"slurm-{st['job_id']}_{t}.out"))
    # the runner's per-task logs are private like the rest of the run directory
    folders, files = _private_tree(run_dir)
    assert f"logs/slurm-{st['job_id']}_4.out" in files and "task4/logs/attempt0/rank0.log" in files
    assert folders == {d: "0o700" for d in folders} and files == {f: "0o600" for f in files}
    # at most 2 at once (the node's CPUs), and not one after another either
    starts.sort()
    assert starts[2] - starts[0] >= 0.9 and starts[1] - starts[0] < 0.9, starts
    # logs: the failed task by default, any other with --task
    proc = hl("logs", st["job_id"], cwd="/")
    assert "1 failed (2)" in proc.stderr and "==> task 2 rank 0 (exit 4)" in proc.stdout, proc
    proc = hl("logs", st["job_id"], "--task", "4", "--json", cwd="/")
    assert json.loads(proc.stdout)[0]["text"].startswith("point 0.5 task 4 ")
    proc = hl("logs", st["job_id"], "--task", "9", cwd="/", check=False)
    assert proc.returncode == 2 and "no task 9" in proc.stderr and "Traceback" not in proc.stderr


def test_a_swept_train_key_reaches_each_task_over_the_train_section(hpc_home, tmp_path):
    """train.KEY in a sweep is read by train_entry in each task, over the job's train: block, which
    a task (run directory task<N>, job.yaml one level up) reads too."""
    from hpclaunch.train_entry.digits import write_digits_csv

    data = tmp_path / "digits.csv"
    write_digits_csv(str(data))
    job = job_file(tmp_path, f"""
name: train sweep
launcher: srun
command: [{sys.executable}, -m, hpclaunch.train_entry, --data, {data}, --max-steps, "2", --no-tensorboard]
resources: {{nodes: 1, tasks_per_node: 1, cpus_per_task: 1}}
monitor: {{interval: 0}}
train: {{lr: 0.0125, batch_per_gpu: 8, seed: 7}}
sweep:
  parameters: {{train.batch_per_gpu: [16, 32], train.async_checkpoint: [false]}}
""")
    hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), timeout=240)
    st = json.loads(hl("status", "train sweep", "--json", cwd="/").stdout)
    assert st["tasks"] == {"COMPLETED": 2}, st
    for t, batch in enumerate([16, 32]):
        with open(os.path.join(st["run_dir"], f"task{t}", "metrics", "rank0.jsonl")) as f:
            header = json.loads(f.readline())
        config = header["config"]
        assert (config["batch_size"], config["async_checkpoint"]) == (batch, False), config
        assert (config["lr"], config["seed"]) == (0.0125, 7), config


def test_local_sweep_cancel_stops_running_and_pending_tasks(hpc_home, tmp_path):
    job = job_file(tmp_path, """
name: slow sweep
launcher: srun
command: [bash, -c, 'sleep 60; echo {i}']
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 2}
monitor: {interval: 0}
sweep: {parameters: {i: {range: [0, 4]}}}
""")
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
    for _ in range(100):
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        if st["tasks"].get("RUNNING"):
            break
        time.sleep(0.1)
    assert st["tasks"] == {"RUNNING": 1, "PENDING": 3}, st   # 2 CPUs a task: one at a time here
    hl("cancel", sub["job_id"], cwd="/")
    for _ in range(150):
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        if st["state"] == "CANCELLED":
            break
        time.sleep(0.1)
    assert st["state"] == "CANCELLED" and st["tasks"] == {"CANCELLED": 4}, st


def _mode(path):
    return oct(os.stat(path).st_mode & 0o777)


@pytest.fixture
def loose_umask():
    """A permissive umask (022, a common default), so a file created without an explicit mode
    shows up as 0644 whatever umask the test run itself has."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _private_tree(run_dir):
    """Every folder and file under run_dir, by path relative to it, with its mode."""
    folders, files = {}, {}
    for d, _, names in os.walk(run_dir):
        folders[os.path.relpath(d, run_dir)] = _mode(d)
        files.update({os.path.relpath(os.path.join(d, n), run_dir): _mode(os.path.join(d, n)) for n in names})
    return folders, files


def test_file_modes_logs_by_rank_and_list_since(hpc_home, tmp_path, monkeypatch, loose_umask):
    # a site profile whose setup line writes a file, and a runs_root hpclaunch has to create
    (tmp_path / "hpc_profiles").mkdir()
    (tmp_path / "hpc_profiles" / "site.yaml").write_text(
        'name: site\nextends: local\nruns_root: out/runs\nsetup: [\'echo site > "$SLURM_SUBMIT_DIR/site.out"\']\n')
    job = job_file(tmp_path, """
name: modes
profile: site
launcher: srun
command: [bash, -c, 'echo "hello from $SLURM_PROCID"']
resources: {nodes: 1, tasks_per_node: 2}
monitor: {interval: 0}
""")
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", "--wait", cwd=str(tmp_path)).stdout)
    run_dir = sub["run_dir"]
    assert run_dir.startswith(str(tmp_path / "out" / "runs") + "/")
    assert _mode(tmp_path / "out") == _mode(tmp_path / "out" / "runs") == "0o700"
    assert (tmp_path / "site.out").read_text() == "site\n" and _mode(tmp_path / "site.out") == "0o600"
    # private: the script and resolved job hold the job's settings, the logs its output (the runner
    # opens slurm.out and runner.log itself, before the script's umask applies), the registry everyone's jobs
    folders, files = _private_tree(run_dir)
    assert set(folders) >= {".", "logs", "logs/attempt0", "monitor", "metrics", "checkpoints", ".hpclaunch"}
    assert folders == {d: "0o700" for d in folders}
    assert set(files) >= {"script.sbatch", "job.yaml", "logs/slurm.out", "logs/runner.log", "logs/attempt0/rank0.log",
                          "logs/attempt0/rank1.log", "logs/attempt0/rank0.exit", ".hpclaunch/local.json",
                          ".hpclaunch/local-job.json", ".hpclaunch/state"}
    assert files == {f: "0o600" for f in files}
    assert _mode(hpc_home / "registry.db") == "0o600" and _mode(hpc_home) == "0o700"

    # logs --rank N: that rank's log only
    one = hl("logs", sub["job_id"], "--rank", "1", cwd="/").stdout
    assert "==> rank 1 (exit 0)" in one and "hello from 1" in one
    assert "rank 0" not in one and "hello from 0" not in one
    rows = json.loads(hl("logs", sub["job_id"], "--rank", "0", "--json", cwd="/").stdout)
    assert [(r["rank"], r["text"]) for r in rows] == [(0, "hello from 0\n")]

    # list --since: a job submitted now is listed, one recorded two hours ago is not
    import hpclaunch.runs.registry as registry
    with monkeypatch.context() as m:
        two_hours_ago = time.time() - 7200
        m.setattr(registry, "time", type("Clock", (), {"time": staticmethod(lambda: two_hours_ago)}))
        reg = registry.Registry()
        old = reg.add(backend="local", cluster="local:test", job_id="9999", name="old job", run_dir=str(tmp_path / "old"))
        reg.close()
    assert abs(old.submit_time - two_hours_ago) < 1
    recent = [r["job_id"] for r in json.loads(hl("list", "--since", "1h", "--json", cwd="/").stdout)]
    assert recent == [sub["job_id"]]
    assert "9999" not in hl("list", "--since", "1h", cwd="/").stdout
    both = [r["job_id"] for r in json.loads(hl("list", "--since", "3h", "--json", cwd="/").stdout)]
    assert both == [sub["job_id"], "9999"]   # newest first; the old row is there, only outside 1h


def test_status_without_a_job_and_cancel_json(hpc_home, tmp_path):
    assert hl("status", cwd="/").stdout.startswith("no active jobs")
    assert json.loads(hl("status", "--json", cwd="/").stdout) == []
    job = job_file(tmp_path, """
name: idle
launcher: srun
command: [bash, -c, 'sleep 120']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
""")
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
    try:
        for _ in range(100):
            rows = json.loads(hl("status", "--json", cwd="/").stdout)
            if rows and rows[0]["state"] == "RUNNING":
                break
            time.sleep(0.1)
        assert [(r["job_id"], r["name"], r["state"]) for r in rows] == [(sub["job_id"], "idle", "RUNNING")], rows
        line = hl("status", cwd="/").stdout.strip()
        assert line.split()[:3] == [sub["job_id"], "idle", "RUNNING"], line
    finally:
        proc = hl("cancel", sub["job_id"], "--json", cwd="/")
    assert json.loads(proc.stdout) == {"job_id": sub["job_id"], "name": "idle", "cancel_requested": True}
    for _ in range(150):
        st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
        if st["state"] != "RUNNING":
            break
        time.sleep(0.1)
    assert st["state"] == "CANCELLED", st
    # issue 14: right after it ends, `status` still shows the job (active ones and those ended in the last hour)
    assert hl("status", cwd="/").stdout.split()[:3] == [sub["job_id"], "idle", "CANCELLED"]


def _runner_pid(run_dir):
    with open(os.path.join(run_dir, ".hpclaunch", "local.json")) as f:
        return json.load(f)["runner_pid"]


def test_a_killed_runner_leaves_the_job_killable_and_truthfully_labelled(hpc_home, tmp_path):
    """Issue 15: after kill -9 of the runner, status said FAILED while the ranks ran on, and
    cancel said "cancel requested" and stopped nothing."""
    marker = f"hl-orphan-{os.getpid()}-{int(time.time())}"
    job = job_file(tmp_path, f"""
name: runner-dies
launcher: srun
command: [bash, -c, 'exec -a {marker} sleep 300']
resources: {{nodes: 1, tasks_per_node: 2}}
monitor: {{interval: 0}}
""")
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
    for _ in range(100):
        if len(subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout.split()) == 2:
            break
        time.sleep(0.1)
    os.kill(_runner_pid(sub["run_dir"]), signal.SIGKILL)
    time.sleep(0.5)
    st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
    assert st["state"] == "RUNNING" and "runner died" in st["reason"], st
    hl("cancel", sub["job_id"], cwd="/")
    for _ in range(50):
        if subprocess.run(["pgrep", "-f", marker]).returncode == 1:
            break
        time.sleep(0.1)
    assert subprocess.run(["pgrep", "-f", marker]).returncode == 1, "ranks outlived the cancel"
    st = json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)
    assert st["state"] == "CANCELLED", st


def test_nothing_a_rank_started_outlives_the_job(hpc_home, tmp_path):
    """Issue 15: after a rank failed, another rank's child (a sleep it started) was left orphaned."""
    marker = f"hl-child-{os.getpid()}-{int(time.time())}"
    job = job_file(tmp_path, f"""
name: child-left
launcher: srun
command: [bash, -c, 'if [ "$SLURM_PROCID" = 1 ]; then sleep 1; exit 3; fi; (exec -a {marker} sleep 300) & wait']
resources: {{nodes: 1, tasks_per_node: 2}}
monitor: {{interval: 0}}
""")
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False)
    assert proc.returncode == 3, proc.stderr
    time.sleep(0.3)
    assert subprocess.run(["pgrep", "-f", marker]).returncode == 1, "a rank's child outlived the job"


def test_the_registry_keeps_when_a_job_ended_not_when_someone_asked(hpc_home, tmp_path):
    """The fleet view and the dashboard read end_time: it is the runner's record of the end, even
    when nobody asks for the job's state until long after."""
    from hpclaunch.launchers.backends.local_runner import read_state
    sub = start_one_rank(tmp_path, "quick", "sleep 0.2")
    deadline = time.time() + 60
    while read_state(sub["run_dir"]).get("state") != "COMPLETED":   # not through hpclaunch: nobody asks
        assert time.time() < deadline, read_state(sub["run_dir"])
        time.sleep(0.1)
    ended = read_state(sub["run_dir"])["end_time"]
    time.sleep(2.5)
    assert json.loads(hl("status", sub["job_id"], "--json", cwd="/").stdout)["state"] == "COMPLETED"
    [row] = json.loads(hl("list", "--all", "--json", cwd="/").stdout)
    assert row["end_time"] == pytest.approx(ended, abs=0.01), (row["end_time"], ended)


def test_torchrun_keeps_its_folder_in_the_run_directory_with_a_ranks_error_file(hpc_home, tmp_path):
    """torchrun's --log-dir is logs/attempt<N>/torchelastic (templates/torchrun.j2): nothing is left
    in the node's /tmp, and a plain torch program that records its errors (torch's own @record, no
    hpclaunch in it) leaves the failing rank's error.json with the job."""
    (tmp_path / "boom.py").write_text(
        "import os\n"
        "from torch.distributed.elastic.multiprocessing.errors import record\n"
        "@record\n"
        "def main():\n"
        "    if os.environ['RANK'] == '1':\n"
        "        raise ValueError('rank one gives up')\n"
        "main()\n")
    job = job_file(tmp_path, f"""
name: torchrun folder
launcher: torchrun
command: [{sys.executable}, boom.py]
resources: {{nodes: 1, tasks_per_node: 2}}
monitor: {{interval: 0}}
""")
    tmp = tmp_path / "node-tmp"
    tmp.mkdir()
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), check=False, timeout=240,
              env=dict(os.environ, TMPDIR=str(tmp)))
    assert proc.returncode != 0, proc.stderr
    st = json.loads(hl("status", "torchrun folder", "--json", cwd="/").stdout)
    assert st["state"] == "FAILED", st
    folder = os.path.join(st["run_dir"], "logs", "attempt0", "torchelastic")
    errors = [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if f == "error.json"]
    assert len(errors) == 1 and os.path.basename(os.path.dirname(errors[0])) == "1", errors
    assert "rank one gives up" in open(errors[0]).read()
    assert not [n for n in os.listdir(tmp) if n.startswith("torchelastic_")], os.listdir(tmp)
