"""train_entry on the real Slurm test cluster: 2-node DDP on digits, and requeue before the time limit."""
import json
import os
import subprocess
import sys

import pytest
from hlcli import hl

pytestmark = pytest.mark.cluster


def epochs(run_dir, rank=0):
    recs = []
    with open(os.path.join(run_dir, "metrics", f"rank{rank}.jsonl")) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "epoch":
                recs.append(rec)
    return recs


@pytest.fixture
def digits(tmp_path):
    subprocess.run([sys.executable, "-m", "hpclaunch.train_entry.digits", str(tmp_path / "digits.csv")],
                   check=True, capture_output=True)
    return tmp_path / "digits.csv"


def test_ddp_digits_two_nodes(slurm, hpc_home, tmp_path, digits):
    (tmp_path / "job.yaml").write_text("""
name: digits-2nodes
profile: testcluster
launcher: torchrun
command: [python, -m, hpclaunch.train_entry, --data, digits.csv, --epochs, "20", --quiet]
resources: {nodes: 2, tasks_per_node: 1, cpus_per_task: 2, time: "00:10:00"}
monitor: {interval: 1.0}
""")
    hl("submit", "job.yaml", "--backend", "slurm", "--wait", cwd=str(tmp_path))
    st = json.loads(hl("status", "digits-2nodes", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED"
    for rank in (0, 1):
        assert epochs(st["run_dir"], rank)[-1]["val_accuracy"] >= 0.95
    header = json.loads(open(os.path.join(st["run_dir"], "metrics", "rank1.jsonl")).readline())
    assert header["world_size"] == 2 and header["host"] == "c2"


EPOCHS = 400     # ~0.24 s each on 2 quiet nodes: more than one attempt's ~50 s of training


def test_requeue_before_the_time_limit(slurm, hpc_home, tmp_path, digits):
    """2-minute limit, signal 60 s before it, ~1.5 minutes of training (2 attempts on a quiet machine):
    the job is signalled, saves, requeues itself, resumes, and ends with every step done once and a good
    model."""
    (tmp_path / "job.yaml").write_text(f"""
name: digits-requeue
profile: testcluster
launcher: torchrun
command: [python, -m, hpclaunch.train_entry, --data, digits.csv, --epochs, "{EPOCHS}", --batch-size, "16", --quiet]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:02:00"}}
monitor: {{interval: 1.0}}
requeue: {{max_attempts: 20, signal: USR1, grace: 60}}
""")
    # Each attempt trains ~50 s (the signal comes 60 s before the 2-minute limit): 2 attempts on a
    # quiet machine; the headroom is for a loaded one (a run stops requeueing once the work is done).
    hl("submit", "job.yaml", "--backend", "slurm", "--wait", cwd=str(tmp_path), timeout=1500)
    st = json.loads(hl("status", "digits-requeue", "--json", cwd="/").stdout)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0, st
    assert st["attempts"] >= 2, st
    run_dir = st["run_dir"]
    state = open(os.path.join(run_dir, ".hpclaunch", "state")).read()
    assert "outcome=requeued" in state and state.strip().splitlines()[-1].endswith("outcome=completed"), state
    recs = epochs(run_dir)
    assert recs[0]["epoch"] == 0
    per_epoch = recs[0]["step"]          # steps count from 1: epoch 0 ends at step = steps per epoch
    final = recs[-1]
    assert final["epoch"] == EPOCHS - 1 and final["val_accuracy"] >= 0.95, final
    assert final["step"] == EPOCHS * per_epoch, (final["step"], per_epoch)   # every step done exactly once
    assert [r["epoch"] for r in recs] == sorted({r["epoch"] for r in recs}), "an epoch was repeated or lost"
    attempts = sorted(d for d in os.listdir(os.path.join(run_dir, "logs")) if d.startswith("attempt"))
    assert len(attempts) == st["attempts"] >= 2
    slurm_out = open(os.path.join(run_dir, "logs", "slurm.out")).read()
    assert "SIGUSR1" in slurm_out and "requeueing" in slurm_out
