"""What a user sees of a job on the real 2-node test cluster (issue 45): the summary of a job that ran
out of time points at the rank that stalled, not at the first to die of the limit's SIGTERM; a
requeued job's attempts with their causes, nodes and the whole job's elapsed time in `--wait`,
`status` and the report; a job waiting behind another says why and until when."""
import json
import os
import re
import subprocess
import sys
import time

import pytest
from hlcli import hl, job_file

pytestmark = pytest.mark.cluster


def run_dir_of(text):
    return [line.split(": ", 1)[1].strip() for line in text.splitlines() if "run directory" in line][0]


def status_json(ref):
    return json.loads(hl("status", ref, "--json", cwd="/").stdout)


STALL = r"""
import os, sys, time
rank = int(os.environ["SLURM_PROCID"])
print(f"rank {rank} starts", flush=True)
time.sleep(3)
if rank == 2:
    print("rank 2 waits for an all-reduce that never comes", flush=True)
    time.sleep(100000)          # in place of a collective a peer never joins
step = 0
while True:
    step += 1
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(1)
"""


def test_timeout_summary_points_at_the_stalled_rank_not_at_a_random_one(slurm, hpc_home, tmp_path):
    """A plain Python program (not train_entry), 2 nodes x 2 ranks; rank 2 stops while the others go on
    printing until the time limit, where every rank dies of SIGTERM within milliseconds."""
    (tmp_path / "stall.py").write_text(STALL)
    job = job_file(tmp_path, f"""
name: stall
profile: testcluster
launcher: srun
command: [{sys.executable}, {tmp_path}/stall.py]
resources: {{nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:01:00"}}
monitor: {{interval: 1}}
requeue: {{max_attempts: 1}}
""")
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False, timeout=400)
    assert proc.returncode == 124, proc.stderr
    run_dir = run_dir_of(proc.stdout)
    hosts = dict(line.split("\t")[:2] for line in open(os.path.join(run_dir, "logs", "attempt0", "ranks.tsv")))
    err = proc.stderr
    assert "ended TIMEOUT, exit code 124" in err and "first failing rank" not in err, err
    assert "the time limit stopped every rank (SIGTERM; exit code 143): no rank failed before it" in err, err
    assert f"rank 2 on {hosts['2']} stopped making progress" in err, err
    assert "the other 3 rank(s) made progress until" in err and "look at rank 2 first" in err, err
    assert "| rank 2 waits for an all-reduce that never comes" in err, err
    exits = [float(open(os.path.join(run_dir, "logs", "attempt0", f"rank{r}.exit")).read().split()[1]) for r in range(4)]
    assert max(exits) - min(exits) < 5, exits      # the limit stopped them all at once: the order is chance


REQUEUE = r"""
import os, time
attempt = int(os.environ["HPCLAUNCH_ATTEMPT"])
print(f"attempt {attempt} rank {os.environ['SLURM_PROCID']}", flush=True)
time.sleep(4)
raise SystemExit(75 if attempt == 0 else 0)      # "requeue me" ($HPCLAUNCH_REQUEUE_EXIT), once
"""


def test_a_requeued_jobs_attempts_elapsed_time_and_causes(slurm, hpc_home, tmp_path):
    (tmp_path / "twice.py").write_text(REQUEUE)
    job = job_file(tmp_path, f"""
name: twice
profile: testcluster
launcher: srun
command: [{sys.executable}, {tmp_path}/twice.py]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 1}}
requeue: {{max_attempts: 2}}
""")
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), check=False, timeout=400)
    run_dir = run_dir_of(proc.stdout)
    batch_log = os.path.join(run_dir, "logs", "slurm.out")
    assert proc.returncode == 0, proc.stderr + (open(batch_log).read() if os.path.exists(batch_log) else "")
    progress = [line for line in proc.stderr.splitlines()      # the state lines (not the alerts' lines)
                if re.match(r"\s+\[\s*\d+ s\] [A-Z_]+\b.* attempt \d+", line)]
    # an attempt is never printed as the next one while it completes (Slurm counts the restart early)
    numbers = [int(re.search(r"attempt (\d+)", line).group(1)) for line in progress]
    assert numbers == sorted(numbers), progress
    first_of_1 = numbers.index(1)
    assert all("COMPLETING" not in line for line in progress[first_of_1:-1]), progress
    assert "attempt 0 ended: step exit code 75: hpclaunch requeued it" in progress[first_of_1], progress
    st = status_json(run_dir)
    assert (st["state"], st["attempts"], st["attempt"]) == ("COMPLETED", 2, 1), st
    first, second = st["attempt_history"]
    assert (first["state"], first["outcome"], first["nodes"], first["cause"]) == (
        "REQUEUED", "requeued", "c[1-2]", "step exit code 75: hpclaunch requeued it"), first
    assert (second["state"], second["cause"], second["job_id"]) == ("COMPLETED", "completed", st["job_id"]), second
    # the whole job's elapsed time, not the last attempt's
    assert st["elapsed_s"] >= first["elapsed_s"] + second["elapsed_s"] and st["elapsed_s"] >= 8, st
    assert st["elapsed_s"] == pytest.approx(second["end_unix"] - first["start_unix"], abs=2)
    text = hl("status", st["job_id"], cwd="/").stdout
    assert "(2 attempts; this one" in text and "attempt 0: job" in text and "hpclaunch requeued it" in text, text
    assert "2 attempts," in proc.stderr and "in all:" in proc.stderr, proc.stderr
    report = json.loads(hl("report", run_dir, "--format", "json", cwd="/").stdout)
    assert report["job"]["attempts"] == 2 and [a["state"] for a in report["attempt_history"]] == ["REQUEUED", "COMPLETED"]
    html = hl("report", run_dir, "--format", "html", cwd="/").stdout
    assert "<h2>Attempts</h2>" in html and "hpclaunch requeued it" in html


def test_a_job_behind_another_says_why_it_waits_and_until_when(slurm, hpc_home, tmp_path):
    """The first job holds every CPU of both nodes; the second needs them too: `--wait` and `status`
    say Slurm's reason in words (Resources, or Priority once planned) and the start it expects."""
    shape = 'resources: {nodes: 2, tasks_per_node: 1, cpus_per_task: 4, time: "00:03:00"}\n'
    base = "profile: testcluster\nlauncher: srun\nmonitor: {interval: 0}\nrequeue: {max_attempts: 1}\n" + shape
    wall = job_file(tmp_path, "name: wall\ncommand: [sleep, '120']\n" + base, "wall.yaml")
    behind = job_file(tmp_path, "name: behind\ncommand: [hostname]\n" + base, "behind.yaml")
    hl("submit", wall, "--backend", "slurm", cwd=str(tmp_path))
    waiting = subprocess.Popen([sys.executable, "-m", "hpclaunch", "submit", behind, "--backend", "slurm", "--wait"],
                               cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, HPCLAUNCH_HEARTBEAT_S="5"))
    try:
        deadline, st = time.time() + 240, {}
        while time.time() < deadline:
            st = json.loads(hl("status", "behind", "--json", cwd="/", check=False).stdout or "{}")
            running = json.loads(hl("status", "wall", "--json", cwd="/").stdout)["state"] == "RUNNING"
            if running and st.get("state") == "PENDING" and st.get("reason") in ("Resources", "Priority") \
                    and st.get("expected_start"):
                break
            time.sleep(2)
        assert st.get("reason") in ("Resources", "Priority") and st.get("expected_start"), st
        assert st["waiting"].startswith(st["reason"] + ": ") and "expected to start" in st["waiting"], st
        text = hl("status", "behind", cwd="/").stdout
        assert f"PENDING     attempt 0 elapsed - nodes - ({st['reason']}: " in text and "expected to start" in text, text
        time.sleep(6)   # a heartbeat of the --wait with the reason
        hl("cancel", "wall", cwd="/")
        out, err = waiting.communicate(timeout=240)
    finally:
        if waiting.poll() is None:
            waiting.kill()
        hl("cancel", "wall", cwd="/", check=False)
    assert waiting.returncode == 0, err
    lines = [line for line in err.splitlines() if "PENDING" in line]
    assert any(re.search(r"PENDING attempt 0 \((Resources|Priority): ", line) or
               re.search(r"PENDING, attempt 0: (Resources|Priority): .*expected to start", line) for line in lines), err


TOUR = r"""
import gc, os, sys, time
import torch
from accelerate import Accelerator

acc = Accelerator()
print(f"rank {os.environ.get('RANK', os.environ['SLURM_PROCID'])} accelerate world {acc.num_processes}", flush=True)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
for _ in range(20):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
time.sleep(12)                    # seen running by the monitor more than once
acc.wait_for_everyone()
del model, opt                    # no DDP object left for the interpreter's teardown (docs/launch-modes.md)
gc.collect()
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize("launcher,env,world,warnings", [
    ("srun", "{}", 1, ["launcher: srun sets none of them", "never held a socket while they ran"]),
    ("torchrun", "{}", 1, ["ignores torchrun's world on CPU nodes unless ACCELERATE_USE_CPU is set"]),
    ("torchrun", '{ACCELERATE_USE_CPU: "1"}', 2, []),
])
def test_an_accelerate_program_forms_one_world_or_is_warned(slurm, hpc_home, tmp_path, require, launcher, env,
                                                             world, warnings):
    """Accelerate's quick tour shape on 2 nodes x 1 rank: under srun and under torchrun on CPU without
    ACCELERATE_USE_CPU each rank is a world of one, and the job still COMPLETES: submit says so (before,
    from the script; after, from the ranks that never held a socket, where it can tell); with the
    variable it is one world and nothing is said."""
    import importlib.util
    require(None if importlib.util.find_spec("accelerate") else "accelerate is not installed "
            "(pip install -e '.[frameworks]'; make venv does)", "the Accelerate test")
    (tmp_path / "tour.py").write_text(TOUR)
    job = job_file(tmp_path, f"""
name: tour-{launcher}
profile: testcluster
launcher: {launcher}
command: [{sys.executable}, tour.py]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:05:00"}}
monitor: {{interval: 1}}
requeue: {{max_attempts: 1}}
env: {env}
""")
    proc = hl("submit", job, "--backend", "slurm", "--wait", cwd=str(tmp_path), timeout=400)
    run_dir = run_dir_of(proc.stdout)
    logs = "".join(open(os.path.join(run_dir, "logs", "attempt0", f"rank{r}.log")).read() for r in (0, 1))
    assert logs.count(f"accelerate world {world}") == 2, logs
    for text in warnings:
        assert text in proc.stderr, proc.stderr
    if not warnings:
        assert "warning:" not in proc.stderr, proc.stderr
