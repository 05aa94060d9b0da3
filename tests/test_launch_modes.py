"""Launch modes on this machine (issue 16): a Ray job on the local backend, and `init --launcher`
starters that validate for every mode."""
import json
import os
import subprocess

import pytest
from hlcli import hl

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@pytest.mark.parametrize("mode,launcher,tasks", [("torchrun", "torchrun", 2), ("ray", "ray", 1), ("jax", "srun", 1),
                                                 ("lightning", "srun", 2), ("mpi", "mpi", 2),
                                                 ("tensorflow", "tensorflow", 2), ("accelerate", "accelerate", 2)])
def test_init_writes_a_valid_starter_for_each_mode(run_cli, tmp_path, monkeypatch, mode, launcher, tasks):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("init", f"{mode}.yaml", "--launcher", mode, "--profile", "testcluster")
    assert code == 0, err
    code, out, err = run_cli("validate", f"{mode}.yaml")
    assert code == 0 and f"profile 'testcluster', {launcher}, 2 node(s) x {tasks} rank(s)" in out, (out, err)
    text = (tmp_path / f"{mode}.yaml").read_text()
    assert f"# {mode}: " in text or mode == "torchrun"
    # the starter's requeue block is the defaults, written out (it once said USR1, which NCCL catches)
    import yaml
    from hpclaunch.spec.job import Requeue
    from hpclaunch.spec.typedload import to_plain
    defaults = to_plain(Requeue())
    assert yaml.safe_load(text)["requeue"] == {k: defaults[k] for k in ("max_attempts", "signal", "grace")}


def test_ray_on_the_local_backend_ends_with_the_driver(hpc_home, tmp_path):
    (tmp_path / "job.yaml").write_text(f"name: ray here\nlauncher: ray\ncommand: [python, {EXAMPLES}/ray_hosts.py, '2']\n"
                                       "resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 2}\n"
                                       "monitor: {interval: 0}\n")
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", "--json", cwd=str(tmp_path), timeout=240)
    run_dir = json.loads(done.stdout)["run_dir"]
    log = open(os.path.join(run_dir, "logs", "attempt0", "rank0.log")).read()
    assert "cpus 2 nodes 1 hosts" in log, log
    assert json.loads(hl("status", run_dir, "--json").stdout)["state"] == "COMPLETED"
    left = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::"], capture_output=True, text=True).stdout
    assert not [line for line in left.splitlines() if "pgrep" not in line], left


def test_ray_runs_where_the_user_has_a_ray_token_of_their_own(hpc_home, tmp_path):
    """Ray (2.5x+) turns token authentication on where it finds ~/.ray/auth_token (any local ray.init()
    leaves one): the job's head, workers and driver then disagreed and Ray never came up. The job's Ray
    has a token of its own, in its private run directory."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("0" * 32)
    os.chmod(home / ".ray" / "auth_token", 0o600)
    (tmp_path / "job.yaml").write_text(f"name: ray token\nlauncher: ray\ncommand: [python, {EXAMPLES}/ray_hosts.py, '2']\n"
                                       "resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 2}\n"
                                       "monitor: {interval: 0}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env["HOME"] = str(home)
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", "--json", cwd=str(tmp_path), timeout=240, env=env)
    run_dir = json.loads(done.stdout)["run_dir"]
    token = os.path.join(run_dir, ".hpclaunch", "ray-auth-token")
    assert os.stat(token).st_mode & 0o077 == 0 and len(open(token).read()) == 64
    assert (home / ".ray" / "auth_token").read_text() == "0" * 32  # the user's own, untouched


def test_pyxis_needs_slurm_and_the_local_backend_says_so(hpc_home, tmp_path):
    (tmp_path / "pyx.yaml").write_text("name: pyx\nextends: local\ncontainer: {runtime: pyxis}\n")
    (tmp_path / "job.yaml").write_text(f"name: boxed\nprofile: {tmp_path}/pyx.yaml\nlauncher: srun\n"
                                       "command: [hostname]\ncontainer: {image: 'nvcr.io#nvidia/pytorch:24.05-py3'}\n")
    proc = hl("submit", "job.yaml", "--backend", "local", cwd=str(tmp_path), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "pyxis runs containers through Slurm's srun" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists() or not os.listdir(tmp_path / "runs")


RAY_REQUEUE = r"""
import os, signal, sys, time
import ray

run_dir, attempt = os.environ["HPCLAUNCH_RUN_DIR"], os.environ["HPCLAUNCH_ATTEMPT"]
state = os.path.join(run_dir, "ray-state")
start = int(open(state).read()) if os.path.exists(state) else 0
step = start


def on_signal(signum, frame):
    with open(state, "w") as f:
        f.write(str(step))
    print(f"attempt {attempt}: {signal.Signals(signum).name} at step {step}, state saved", flush=True)
    sys.exit(int(os.environ["HPCLAUNCH_REQUEUE_EXIT"]))


signal.signal(getattr(signal, "SIG" + os.environ["HPCLAUNCH_REQUEUE_SIGNAL"]), on_signal)
ray.init()


@ray.remote
def work(i):
    return i * i


print(f"attempt {attempt}: starts at step {start}", flush=True)
while step < (start + 5 if start else 10**9):
    ray.get([work.remote(i) for i in range(4)])
    step += 1
    time.sleep(0.2)
print(f"attempt {attempt}: done at step {step}", flush=True)
"""


def test_ray_driver_gets_the_requeue_signal_saves_and_resumes_with_the_monitor_on(hpc_home, tmp_path):
    """launcher: ray and the job contract (issue 16): with `signal_ranks`, the driver's own handler gets
    the requeue signal before the time limit (the local runner plays Slurm's part), saves its state and
    exits with the requeue code; the job runs again, its driver resumes from that state and completes.
    Ray stops between the attempts (nothing left), and the monitor samples both attempts."""
    (tmp_path / "driver.py").write_text(RAY_REQUEUE)
    (tmp_path / "job.yaml").write_text(
        "name: ray-requeue\nlauncher: ray\ncommand: [python, driver.py]\n"
        "resources: {nodes: 1, tasks_per_node: 1, cpus_per_task: 2, time: '00:01:20'}\n"
        "monitor: {interval: 1}\nrequeue: {max_attempts: 2, grace: 40, signal_ranks: true}\n")
    done = hl("submit", "job.yaml", "--backend", "local", "--wait", "--json", cwd=str(tmp_path), timeout=400)
    run_dir = json.loads(done.stdout)["run_dir"]
    st = json.loads(hl("status", run_dir, "--json").stdout)
    assert st["state"] == "COMPLETED" and st["exit_code"] == 0 and st["attempts"] == 2, st
    first = open(os.path.join(run_dir, "logs", "attempt0", "rank0.log")).read()
    saved = int(first.split("state saved")[0].rsplit("at step ", 1)[1].split(",")[0])
    assert saved > 0 and "done at step" not in first, first
    second = open(os.path.join(run_dir, "logs", "attempt1", "rank0.log")).read()
    assert f"starts at step {saved}" in second and f"done at step {saved + 5}" in second, second
    out = open(os.path.join(run_dir, "logs", "slurm.out")).read()
    assert "passing it on to every rank process" in out and "requeueing" in out, out
    left = subprocess.run(["pgrep", "-af", "raylet|gcs_server|ray::"], capture_output=True, text=True).stdout
    assert not [line for line in left.splitlines() if "pgrep" not in line], left
    mon = os.path.join(run_dir, "monitor")
    host_csv = [n for n in os.listdir(mon) if n.endswith(".host.csv")]
    starts = [line for n in os.listdir(mon) if n.endswith(".events.jsonl")
              for line in open(os.path.join(mon, n)) if '"header"' in line]
    assert host_csv and len(starts) == 2, (os.listdir(mon), starts)          # a monitor per attempt
