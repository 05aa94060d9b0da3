"""2 ranks (torchrun, gloo) on scikit-learn's digits reach >= 95 % validation accuracy."""
import glob
import json
import os
import sys
import time

from conftest import rank_env, run, torchrun_cmd
from hpclaunch.train_entry.metrics import read_metrics

STEP_KEYS = {"kind", "time_unix", "rank", "epoch", "step", "loss", "samples_per_s", "step_time_s", "samples",
             "grad_norm", "lr"}
EPOCH_KEYS = {"kind", "time_unix", "rank", "epoch", "step", "loss", "val_loss", "val_accuracy", "accuracy"}


def test_two_rank_ddp_digits(tmp_path, digits_csv):
    run_dir = tmp_path / "run"
    t0 = time.time()
    res = run(torchrun_cmd(2, "--data", digits_csv, "--epochs", 20, "--dist-timeout", 60),
              env=rank_env(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_JOB_NAME="digits"), timeout=150)
    wall = time.time() - t0
    assert res.returncode == 0, res.stdout[-3000:]
    assert wall < 120, f"took {wall:.0f} s"
    # one log line per rank with rank, local rank, world size, host, device, backend
    for r in (0, 1):
        assert f"rank={r} local_rank={r} world_size=2 host=" in res.stdout and "device=cpu backend=gloo" in res.stdout
    files = sorted(glob.glob(str(run_dir / "metrics" / "rank*.jsonl")))
    assert [os.path.basename(f) for f in files] == ["rank0.jsonl", "rank1.jsonl"]
    finals = []
    for r, f in enumerate(files):
        recs = read_metrics(f)
        assert recs[0]["kind"] == "header" and recs[0]["schema"] == "hpclaunch.metrics/1"
        assert recs[0]["world_size"] == 2 and recs[0]["backend"] == "gloo" and recs[0]["rank"] == r
        steps = [x for x in recs if x["kind"] == "step"]
        epochs = [x for x in recs if x["kind"] == "epoch"]
        assert steps and STEP_KEYS <= set(steps[0]) and all(x["rank"] == r for x in steps)
        # default --log-every 10, plus a record closing each epoch: together they cover every step once
        per_epoch = epochs[0]["step"]
        want = sorted({s for s in range(10, 20 * per_epoch + 1, 10)} | {e * per_epoch for e in range(1, 21)})
        assert [x["step"] for x in steps] == want
        assert sum(x.get("steps", 1) for x in steps) == 20 * per_epoch
        assert len(epochs) == 20 and EPOCH_KEYS <= set(epochs[-1])
        assert all(0.0 <= x["val_accuracy"] <= 1.0 for x in epochs)
        finals.append(epochs[-1]["val_accuracy"])
    assert finals[0] == finals[1]          # validation is all-reduced: every rank reports the same number
    assert finals[0] >= 0.95, finals
    with open(run_dir / ".hpclaunch" / "finished") as f:
        fin = json.load(f)
    assert fin["epoch"] == 20 and fin["step"] == 20 * per_epoch
    ck = sorted(os.listdir(run_dir / "checkpoints"))
    assert len(ck) == 3   # keep 3
    last = run_dir / "checkpoints" / f"step-{fin['step']}"
    assert {"model.safetensors", "trainer.pt", "rng-rank0.pt", "rng-rank1.pt", "manifest.json"} <= set(os.listdir(last))
    print(f"\n2-rank DDP digits: val_accuracy={finals[0]:.4f} wall={wall:.1f}s")


def test_no_ddp_object_is_alive_at_the_last_barrier(tmp_path):
    """With a DDP wrapper alive at the last barrier, the barrier's work can hold DDP's last gradient
    all-reduce, which gloo's thread frees later, perhaps during teardown: torch 2.13 then aborts a
    finished run (exit 134; docs/launch-modes.md). The trainer lets go of it first."""
    probe = os.path.join(os.path.dirname(__file__), "_ddp_alive_probe.py")
    cmd = [c for c in torchrun_cmd(2) if c not in ("-m", "hpclaunch.train_entry")]
    res = run(cmd + [probe, "--data", "digits", "--epochs", 1, "--run-dir", tmp_path / "run"], timeout=150)
    assert res.returncode == 0, res.stdout[-3000:]
    lines = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("LIVE_DDP")]
    assert [(ln[2], ln[4]) for ln in lines] == [("0", "0"), ("0", "0")], res.stdout[-3000:]


def test_a_finished_rank_leaves_without_interpreter_teardown(tmp_path):
    """torch 2.13 aborts a finished DDP run in interpreter teardown now and then (exit 134; the demo
    in CI of 2026-11-27; 15 of 150 two-rank runs of a bare DDP script, docs/launch-modes.md).
    `python -m hpclaunch.train_entry` does not tear down: every rank exits 0 with nothing finalized,
    and what teardown would have flushed is out. The control, a script's sys.exit(main()), does."""
    probe = os.path.join(os.path.dirname(__file__), "_teardown_probe.py")
    cmd = [c for c in torchrun_cmd(2) if c not in ("-m", "hpclaunch.train_entry")]
    env = {k: v for k, v in rank_env().items() if k != "PYTHONUNBUFFERED"}  # stdout to a pipe: block-buffered
    res = run(cmd + [probe, "entry", "--data", "digits", "--epochs", 1, "--run-dir", tmp_path / "entry"], env=env,
              timeout=150)
    assert res.returncode == 0, res.stdout[-3000:]
    assert (tmp_path / "entry" / ".hpclaunch" / "finished").exists()
    assert not list((tmp_path / "entry").glob("teardown-rank*"))
    assert "INFO epoch 0 step" in res.stdout, res.stdout[-3000:]
    assert res.stdout.count("PROBE: buffered stdout") == 2, res.stdout[-3000:]  # both ranks' (lines may interleave)
    # the control, one rank without torchrun (whether teardown aborts is chance: only the mark counts)
    ctl = run([sys.executable, probe, "script", "--data", "digits", "--epochs", 1, "--run-dir", tmp_path / "script"],
              env=env, timeout=150)
    assert ctl.returncode == 0, ctl.stdout[-3000:]
    assert os.path.exists(tmp_path / "script" / "teardown-rank0")
    assert "PROBE: buffered stdout 0" in ctl.stdout
