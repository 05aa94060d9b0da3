"""`hpclaunch tune` on the 2-node test cluster (issue 48, docs/tune.md): trials as tasks of a Slurm
array. Kept small (the cluster is shared): 6 trials, 2 at a time. The 40-trial figures are
bench/tune's. The machine has no GPU: the monitor reads the fake NVML (tests/monitors/fake_nvml.py),
so each trial's report has an energy."""
import json
import os
import subprocess
import time

import pytest
from hlcli import hl, job_file

pytestmark = pytest.mark.cluster
pytest.importorskip("optuna")

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_NVML = os.path.join(HERE, "monitors", "fake_nvml.py")


def _env():
    return dict(os.environ, HPCLAUNCH_MONITOR_FAKE_NVML=FAKE_NVML)


def test_a_train_entry_study_completes_and_registry_study_and_table_agree(slurm, hpc_home, tmp_path):
    job = job_file(tmp_path, """\
name: digits-study
profile: testcluster
launcher: torchrun
command: [python3, -m, hpclaunch.train_entry, --data, digits, --epochs, "3", --hidden, "{hidden}",
          --no-tensorboard, --no-mlflow, --quiet]
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}
monitor: {interval: 0.5}
env: {OMP_NUM_THREADS: "1"}
sweep:
  method: tpe
  metric: val_accuracy
  trials: 6
  parallelism: 2
  seed: 1
  parameters:
    train.lr: {loguniform: [1.0e-3, 3.0e-2]}
    train.batch_per_gpu: [32, 64]
    hidden: ["64", "128,64"]
""")
    proc = hl("tune", job, "--backend", "slurm", cwd=str(tmp_path), env=_env(), timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(hl("tune", "report", "digits-study", "--format", "json").stdout)
    assert doc["finished"] == 6 and doc["counts"]["complete"] == 6, doc["counts"]
    assert doc["best"]["value"] > 0.8, doc["best"]
    (study_job,) = doc["jobs"]
    # the registry: one array of 6 tasks, all completed
    st = json.loads(hl("status", study_job["job_id"], "--json").stdout)
    assert st["tasks"] == {"COMPLETED": 6}, st
    (row,) = [r for r in json.loads(hl("list", "--all", "--json").stdout) if r["job_id"] == study_job["job_id"]]
    assert row["array_size"] == 6 and row["run_dir"] == st["run_dir"] == study_job["run_dir"], row
    table = hl("tune", "status", "digits-study").stdout
    seen_dirs = set()
    for t in doc["trials"]:
        # the study's trial ran in a task of that registry job: its run directory, its trial.json
        assert t["job_id"] == study_job["job_id"] and os.path.dirname(t["run_dir"]) == st["run_dir"], t
        assert os.path.basename(t["run_dir"]) == f"task{t['task']}"
        with open(os.path.join(t["run_dir"], ".hpclaunch", "trial.json")) as f:
            ran = json.load(f)
        assert ran["number"] == t["number"] and ran["params"] == t["params"]
        seen_dirs.add(t["run_dir"])
        # train_entry read the trial's values: its header's config has them
        with open(os.path.join(t["run_dir"], "metrics", "rank0.jsonl")) as f:
            header = json.loads(f.readline())
        assert header["config"]["lr"] == pytest.approx(t["params"]["train.lr"])
        assert header["config"]["batch_size"] == t["params"]["train.batch_per_gpu"]
        assert header["config"]["hidden"] == t["params"]["hidden"]
        assert t["steps"] > 0 and t["energy_j"] and t["energy_j"] > 0, t
        # and the table says the same
        row = next(line.split() for line in table.splitlines() if line.split()[:1] == [str(t["number"])])
        assert row[1] == "complete" and f"{t['value']:.4g}" in row, (row, t)
    assert len(seen_dirs) == 6
    assert doc["energy"]["total"]["joules"] == pytest.approx(sum(t["energy_j"] for t in doc["trials"]))
    assert "--hidden" in doc["best"]["job_file"] and "sweep" not in doc["best"]["job_file"]


SLOW = """\
import sys, time
from hpclaunch.tune import report
x = float(sys.argv[1])
for step in range(8):
    time.sleep(1.0)
    report(step, -(x - 0.5) ** 2)
"""


def _wait_final(job_id, limit=300):
    deadline = time.time() + limit
    while True:
        st = json.loads(hl("status", job_id, "--json").stdout)
        if st["state"] not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED", "SUSPENDED"):
            return st
        assert time.time() < deadline, st
        time.sleep(1)


def test_scancel_mid_way_then_resume_runs_every_trial_once(slurm, hpc_home, tmp_path):
    (tmp_path / "slow.py").write_text(SLOW)
    job = job_file(tmp_path, """\
name: resumed
profile: testcluster
launcher: srun
command: [python3, slow.py, "{x}"]
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}
monitor: {interval: 0}
sweep: {method: tpe, metric: value, trials: 6, parallelism: 2, parameters: {x: {uniform: [0, 1]}}}
""")
    start = json.loads(hl("tune", job, "--backend", "slurm", "--detach", "--json", cwd=str(tmp_path)).stdout)
    deadline = time.time() + 300
    while True:  # mid-way: some trials ended, others run
        doc = json.loads(hl("tune", "status", "resumed", "--json").stdout)
        if doc["finished"] >= 2 and doc["counts"]["running"] >= 1:
            break
        assert time.time() < deadline, doc
        time.sleep(0.5)
    subprocess.run(["scancel", start["job_id"]], check=True)
    proc = hl("tune", job, "--resume", cwd=str(tmp_path), check=False)  # the array is still ending, or has
    assert proc.returncode == 0 or "is still" in proc.stderr, proc.stderr
    if proc.returncode:
        _wait_final(start["job_id"])
        proc = hl("tune", job, "--resume", "--backend", "slurm", cwd=str(tmp_path), timeout=600)
    assert "were interrupted: their points run again" in proc.stdout, proc.stdout
    doc = json.loads(hl("tune", "report", "resumed", "--format", "json").stdout)
    ended = [t for t in doc["trials"] if t["state"] in ("complete", "pruned", "failed")]
    interrupted = [t for t in doc["trials"] if t["state"] == "interrupted"]
    assert len(ended) == 6 and doc["counts"]["complete"] == 6, doc["counts"]
    assert interrupted and len(doc["jobs"]) == 2
    # none twice: every ended trial ran in its own task; each interrupted point ran again exactly once
    assert len({t["run_dir"] for t in ended}) == 6
    for t in interrupted:
        assert sum(1 for e in ended if e["params"] == t["params"]) == 1, (t, ended)
    # the resumed array ran only what was still owed
    first = [e for e in ended if e["job_id"] == doc["jobs"][0]["job_id"]]
    assert doc["jobs"][1]["tasks"] == 6 - len(first) and doc["jobs"][0]["tasks"] == 6


BASH_PROGRAM = """\
#!/bin/bash
# A program with no hpclaunch in it: it appends the documented line to $HPCLAUNCH_TUNE_REPORT.
x=$1
for step in 0 1 2 3 4 5 6 7 8 9; do
  printf '{"step": %d, "value": %s}\\n' "$step" "$x" >>"$HPCLAUNCH_TUNE_REPORT"
  sleep 0.5
done
"""


def test_an_outside_program_is_tuned_and_pruned_through_the_line_format(slurm, hpc_home, tmp_path):
    (tmp_path / "prog.sh").write_text(BASH_PROGRAM)
    job = job_file(tmp_path, """\
name: outside
profile: testcluster
launcher: srun
command: [bash, prog.sh, "{x}"]
resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}
monitor: {interval: 0}
sweep:
  method: grid
  metric: value
  parallelism: 1
  prune: {method: median, warmup_steps: 1, startup_trials: 1}
  parameters: {x: ["0.9", "0.1", "0.2"]}
""")
    proc = hl("tune", job, "--backend", "slurm", cwd=str(tmp_path), timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(hl("tune", "report", "outside", "--format", "json").stdout)
    by = {t["params"]["x"]: t for t in doc["trials"]}
    # the grid runs in order, one at a time: 0.9 completes, then 0.1 and 0.2 fall behind its median
    assert by["0.9"]["state"] == "complete" and by["0.9"]["steps"] == 9 and by["0.9"]["value"] == 0.9
    for x in ("0.1", "0.2"):
        assert by[x]["state"] == "pruned" and 1 <= by[x]["steps"] < 9, by[x]
    st = json.loads(hl("status", doc["jobs"][0]["job_id"], "--json").stdout)
    assert st["tasks"] == {"COMPLETED": 3}, st  # pruned tasks end cleanly: their resources are free
    assert doc["energy"]["pruned"]["trials"] == 2
