"""The local backend: the same script as a one-node allocation, with the registry, status, logs,
cancel, the time limit and requeue, and no Slurm at all."""
import json
import os
import subprocess
import sys
import time

import pytest


def hl(*args, cwd, check=True, timeout=120, env=None):
    proc = subprocess.run([sys.executable, "-m", "hpclaunch", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check:
        assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
    return proc


def write_job(tmp_path, body, name="job.yaml"):
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_submit_wait_status_logs(hpc_home, tmp_path):
    job = write_job(tmp_path, """
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
    logs = hl("logs", st["job_id"], cwd="/").stdout
    assert logs.index("==> rank 1 (exit 3)") < logs.index("==> rank 0")   # the failing rank first
    assert "rank 1 of 2 job " + st["job_id"] in logs
    mon = os.path.join(st["run_dir"], "monitor")
    assert any(f.endswith(".host.csv") for f in os.listdir(mon))
    rows = json.loads(hl("list", "--all", "--json", cwd="/").stdout)
    assert [r["state"] for r in rows] == ["FAILED"] and rows[0]["job_sha256"]


def test_cancel(hpc_home, tmp_path):
    job = write_job(tmp_path, """
name: long
launcher: srun
command: [bash, -c, 'echo up; sleep 120']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0}
""")
    sub = json.loads(hl("submit", job, "--backend", "local", "--json", cwd=str(tmp_path)).stdout)
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
    job = write_job(tmp_path, f"""
name: requeue me
launcher: srun
command: [{script}]
resources: {{nodes: 1, tasks_per_node: 1, time: "00:05"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 3, grace: 2}}
""")
    # A 5-second limit with the signal 2 s before: the first attempt must stop early and requeue.
    proc = hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path), timeout=120)
    st = json.loads(hl("status", "requeue me", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["attempts"] >= 2, st
    first = open(os.path.join(st["run_dir"], "logs", "attempt0", "rank0.log")).read()
    second = open(os.path.join(st["run_dir"], "logs", "attempt1", "rank0.log")).read()
    assert "saving at" in first and "starts at 0" in first
    assert "starts at 0" not in second
    assert open(os.path.join(st["run_dir"], "checkpoints", "step")).read().strip() == "8"


def test_nodes_over_one_is_refused(hpc_home, tmp_path):
    job = write_job(tmp_path, "name: two\nprofile: testcluster\nlauncher: srun\ncommand: [hostname]\n")
    proc = hl("submit", job, "--backend", "local", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "resources.nodes: the local backend runs one node" in proc.stderr
    assert json.loads(hl("list", "--all", "--json", cwd="/").stdout) == []


def test_report_of_a_local_job_and_the_fleet(hpc_home, tmp_path):
    job = write_job(tmp_path, """
name: reported
launcher: srun
command: [bash, -c, 'sleep 2']
resources: {nodes: 1, tasks_per_node: 1}
monitor: {interval: 0.25}
""")
    hl("submit", job, "--backend", "local", "--wait", cwd=str(tmp_path))
    rep = json.loads(hl("report", "reported", "--format", "json", cwd="/").stdout)
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
