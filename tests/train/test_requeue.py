"""Requeue protocol at rank level: flag file -> all ranks checkpoint at the same step, exit 75 -> rerun."""
import json
import os
import signal
import subprocess
import threading
import time

from conftest import rank_env, torchrun_cmd
from hpclaunch.train_entry.metrics import read_metrics
from hpclaunch.train_entry.signals import StopRequest

EPOCHS = 20
STEPS_PER_EPOCH = 11   # 1437 train rows / 2 ranks = 718 -> 11 batches of 64


def _touch_when_step(run_dir, flag, min_step, stop_evt):
    path = os.path.join(run_dir, "metrics", "rank0.jsonl")
    while not stop_evt.is_set():
        if os.path.exists(path):
            steps = [r["step"] for r in read_metrics(path) if r.get("kind") == "step"]
            if steps and steps[-1] >= min_step:
                open(flag, "w").close()
                return
        time.sleep(0.01)


def _torchrun(env, digits_csv):
    cmd = torchrun_cmd(2, "--data", digits_csv, "--epochs", EPOCHS, "--dist-timeout", 60, "--stop-check-every", 1,
                       "--log-every", 1,
                       "--deterministic")
    return subprocess.run(cmd, env=env, timeout=150, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_requeue_flag_two_ranks(tmp_path, digits_csv):
    run_dir = str(tmp_path / "run")
    flag = os.path.join(run_dir, ".hpclaunch", "requeue-requested")
    os.makedirs(os.path.dirname(flag))
    env = rank_env(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_REQUEUE_FLAG=flag, HPCLAUNCH_REQUEUE_EXIT=75,
                   HPCLAUNCH_ATTEMPT=0)
    stop_evt = threading.Event()
    watcher = threading.Thread(target=_touch_when_step, args=(run_dir, flag, 25, stop_evt), daemon=True)
    watcher.start()
    res = _torchrun(env, digits_csv)
    stop_evt.set()
    assert os.path.exists(flag), "the test's watcher never raised the flag"
    # every rank exited 75 (torchrun itself reports any non-zero worker exit as 1)
    assert "exitcode  : 75" in res.stdout or "exitcode: 75" in res.stdout, res.stdout[-3000:]
    assert not os.path.exists(os.path.join(run_dir, ".hpclaunch", "finished"))
    stops = []
    for r in (0, 1):
        recs = read_metrics(os.path.join(run_dir, "metrics", f"rank{r}.jsonl"))
        rq = [x for x in recs if x["kind"] == "requeue"]
        assert len(rq) == 1, f"rank {r}: {rq}"
        stops.append(rq[0]["step"])
    assert stops[0] == stops[1], f"ranks stopped at different steps {stops}"
    stop_step = stops[0]
    assert 25 <= stop_step < EPOCHS * STEPS_PER_EPOCH
    ck = os.path.join(run_dir, "checkpoints", f"step-{stop_step}")
    assert {"rng-rank0.pt", "rng-rank1.pt", "manifest.json"} <= set(os.listdir(ck))

    # attempt 1: the shell did not remove the (already served) flag: it must be ignored
    env["HPCLAUNCH_ATTEMPT"] = "1"
    res2 = _torchrun(env, digits_csv)
    assert res2.returncode == 0, res2.stdout[-3000:]
    assert f"resuming from {ck}" in res2.stdout
    with open(os.path.join(run_dir, ".hpclaunch", "finished")) as f:
        fin = json.load(f)
    assert fin["step"] == EPOCHS * STEPS_PER_EPOCH and fin["epoch"] == EPOCHS
    recs = read_metrics(os.path.join(run_dir, "metrics", "rank1.jsonl"))
    headers = [x for x in recs if x["kind"] == "header"]
    assert [h["attempt"] for h in headers] == [0, 1] and headers[1]["resumed_step"] == stop_step
    steps = [x["step"] for x in recs if x["kind"] == "step"]
    assert steps == list(range(1, EPOCHS * STEPS_PER_EPOCH + 1))   # no step lost, none repeated

    # 2-rank DDP (gloo) resume is bitwise too: compare with an uninterrupted run
    ref_dir = str(tmp_path / "ref")
    ref = _torchrun(rank_env(HPCLAUNCH_RUN_DIR=ref_dir), digits_csv)
    assert ref.returncode == 0, ref.stdout[-3000:]
    final = os.path.join("checkpoints", f"step-{fin['step']}", "model.safetensors")
    with open(os.path.join(run_dir, final), "rb") as f1, open(os.path.join(ref_dir, final), "rb") as f2:
        assert f1.read() == f2.read(), "requeued + resumed 2-rank run differs from the uninterrupted one"


def test_signals_and_flag_only_set_a_variable(tmp_path):
    flag = str(tmp_path / "flag")
    sr = StopRequest(flag, str(tmp_path / "ctl"))
    sr.install()
    try:
        assert not sr.local()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert sr.local() and sr.reason == "signal SIGUSR1"
    finally:
        sr.uninstall()
    sr = StopRequest(flag, str(tmp_path / "ctl"))
    open(flag, "w").close()
    assert sr.local() and "requeue flag" in sr.reason
    sr.mark_served(step=5)
    assert not StopRequest(flag, str(tmp_path / "ctl")).local()       # served flag: stale for the next attempt
    time.sleep(0.01)
    os.remove(flag)
    open(flag, "w").close()                                            # a new request (new inode/mtime)
    assert StopRequest(flag, str(tmp_path / "ctl")).local()


def test_signal_to_the_rank_checkpoints_and_exits_75(tmp_path, digits_csv):
    """SIGUSR2 (or SIGTERM) delivered to the rank process itself: same path as the flag file."""
    from conftest import PY

    run_dir = str(tmp_path / "run")
    proc = subprocess.Popen([PY, "-m", "hpclaunch.train_entry", "--data", digits_csv, "--run-dir", run_dir,
                             "--epochs", "200", "--stop-check-every", "1"],
                            env=rank_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = os.path.join(run_dir, "metrics", "rank0.jsonl")
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(metrics) and any(r.get("kind") == "step" and r["step"] >= 5 for r in read_metrics(metrics)):
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR2)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 75, out[-2000:]
    rq = [r for r in read_metrics(metrics) if r["kind"] == "requeue"]
    assert len(rq) == 1 and rq[0]["reason"] == "signal SIGUSR2"
    assert os.path.isfile(os.path.join(run_dir, "checkpoints", f"step-{rq[0]['step']}", "manifest.json"))
