"""train_entry follows the job's checkpoint cadence (HPCLAUNCH_CHECKPOINT_INTERVAL_S, docs/recovery.md):
every rank saves at the same step once rank 0's clock says the interval passed, records what the
save cost, and an explicit --checkpoint-every keeps its steps."""
import os
import subprocess

import pytest

from conftest import rank_env, torchrun_cmd
from hpclaunch.train_entry.config import ConfigError, TrainConfig, checkpoint_interval
from hpclaunch.train_entry.metrics import read_metrics


def test_which_interval_applies():
    env = {"HPCLAUNCH_CHECKPOINT_INTERVAL_S": "120"}
    assert checkpoint_interval(TrainConfig(), env) == 120.0
    assert checkpoint_interval(TrainConfig(), {}) is None
    assert checkpoint_interval(TrainConfig(checkpoint_every=50), env) is None      # steps chosen: they win
    assert checkpoint_interval(TrainConfig(checkpoint_interval_s=30.0), env) == 30.0
    assert checkpoint_interval(TrainConfig(checkpoint_interval_s=0.0), env) is None  # 0: off
    with pytest.raises(ConfigError, match="HPCLAUNCH_CHECKPOINT_INTERVAL_S='soon' is not a number"):
        checkpoint_interval(TrainConfig(), {"HPCLAUNCH_CHECKPOINT_INTERVAL_S": "soon"})


def test_two_ranks_checkpoint_together_by_time_and_record_the_cost(tmp_path, digits_csv):
    run_dir = str(tmp_path / "run")
    # a step is ~2-20 ms here: one epoch of 89 steps a rank (batch 8) holds several 0.1 s intervals
    cmd = torchrun_cmd(2, "--data", digits_csv, "--epochs", 1, "--batch-size", 8, "--stop-check-every", 1,
                       "--log-every", 1, "--dist-timeout", 60)
    res = subprocess.run(cmd, env=rank_env(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_CHECKPOINT_INTERVAL_S="0.1"),
                         timeout=150, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    recs = read_metrics(os.path.join(run_dir, "metrics", "rank0.jsonl"))
    saves = [r for r in recs if r["kind"] == "checkpoint"]
    epoch_ends = {r["step"] for r in recs if r["kind"] == "epoch"}
    by_time = [r["step"] for r in saves if r["step"] not in epoch_ends]
    assert by_time, saves                                     # more than the epoch ends'
    assert all(0 <= r["seconds"] < 30 for r in saves)
    # the same steps' checkpoints exist: every rank saved there (rank 0 alone writes the model)
    kept = sorted(int(n.split("-")[1]) for n in os.listdir(os.path.join(run_dir, "checkpoints"))
                  if n.startswith("step-"))
    assert kept[-1] == max(epoch_ends)
    # spacing: no two time-based checkpoints closer than about the interval (one answer per request:
    # the request in flight when a save happened is not answered twice)
    times = [r["time_unix"] for r in saves if r["step"] not in epoch_ends]
    assert all(b - a > 0.1 * 0.5 for a, b in zip(times, times[1:]))


def test_explicit_steps_are_kept_and_no_time_checkpoint_is_added(tmp_path, digits_csv):
    run_dir = str(tmp_path / "run")
    cmd = torchrun_cmd(2, "--data", digits_csv, "--epochs", 2, "--checkpoint-every", 5, "--dist-timeout", 60)
    res = subprocess.run(cmd, env=rank_env(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_CHECKPOINT_INTERVAL_S="0.01"),
                         timeout=150, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    steps = [r["step"] for r in read_metrics(os.path.join(run_dir, "metrics", "rank0.jsonl"))
             if r["kind"] == "checkpoint"]
    assert steps == [5, 10, 11, 15, 20, 22], steps     # every 5 steps, and the two epoch ends (11 a rank)


def test_with_the_runtimes_mtbf_the_interval_is_retuned_with_the_measured_cost(tmp_path, digits_csv):
    """HPCLAUNCH_MTBF_S (auto): after its first save rank 0 takes Daly's interval for the cost it
    measured, here minutes (a cost of ms, an MTBF of 10 h): one time-based save, not one every 0.1 s."""
    run_dir = str(tmp_path / "run")
    cmd = torchrun_cmd(2, "--data", digits_csv, "--epochs", 1, "--batch-size", 8, "--stop-check-every", 1,
                       "--log-every", 1, "--dist-timeout", 60)
    res = subprocess.run(cmd, env=rank_env(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_CHECKPOINT_INTERVAL_S="0.1",
                                           HPCLAUNCH_MTBF_S="36000"),
                         timeout=150, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    recs = read_metrics(os.path.join(run_dir, "metrics", "rank0.jsonl"))
    epoch_ends = {r["step"] for r in recs if r["kind"] == "epoch"}
    by_time = [r for r in recs if r["kind"] == "checkpoint" and r["step"] not in epoch_ends]
    assert len(by_time) == 1, by_time
