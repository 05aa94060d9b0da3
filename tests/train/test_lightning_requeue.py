"""hpclaunch's RequeueCallback in a real 2-rank Lightning DDP program (gloo, CPU): every rank stops
at the same step, the checkpoint is published under Lightning's name, the ranks exit 75, and the next
attempt resumes from it. On the test cluster: tests/test_job_contract_cluster.py."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import rank_env, run

JOB = os.path.join(os.path.dirname(__file__), "_lightning_requeue_job.py")
# find_spec, not importorskip: importing lightning (and torch) at collection would put ~500 MiB into
# the pytest process for every test after (tests/monitors measures its own RSS).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                reason="lightning is not installed (pip install -e '.[frameworks]'; make venv does)")


@pytest.mark.parametrize("mode", ["signal", "flag"])
def test_every_rank_stops_at_one_step_saves_and_the_next_attempt_resumes(tmp_path, mode):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = dict(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_REQUEUE_FLAG=run_dir / ".hpclaunch" / "requeue-requested",
               HPCLAUNCH_REQUEUE_SIGNAL="USR2", MODE=mode)
    (run_dir / ".hpclaunch").mkdir()
    first = run([sys.executable, JOB], env=rank_env(HPCLAUNCH_ATTEMPT=0, **env), timeout=240, cwd=tmp_path)
    assert first.returncode == 75, first.stdout[-3000:]
    out = first.stdout
    # rank 1 alone was signalled (or rank 0 alone saw the flag): both stopped after step 7
    assert "finished at step" not in out, out[-3000:]
    why = "another rank" if mode == "signal" else "requeue flag"
    assert f"requeue requested ({why}" in out and "written at step 7; exiting 75" in out, out[-3000:]
    names = sorted(os.listdir(run_dir))
    assert "hpc_ckpt_1.ckpt" in names and not [n for n in names if "partial" in n], names
    marker = json.loads((run_dir / ".hpclaunch" / "requeue-exit.attempt0").read_text())
    assert marker["step"] == 7 and marker["checkpoint"] == str(run_dir / "hpc_ckpt_1.ckpt"), marker
    if mode == "flag":  # the flag this exit answered is not taken for a new request by the next attempt
        served = json.loads((run_dir / ".hpclaunch" / "requeue-served.json").read_text())
        assert served["step"] == 7 and served["flag_stat"], served

    second = run([sys.executable, JOB], env=rank_env(HPCLAUNCH_ATTEMPT=1, **env), timeout=240, cwd=tmp_path)
    assert second.returncode == 0, second.stdout[-3000:]
    assert "Restoring states from the checkpoint" in second.stdout and "hpc_ckpt_1.ckpt" in second.stdout
    assert "attempt 1 rank 0 finished at step 40" in second.stdout
    assert "attempt 1 rank 1 finished at step 40" in second.stdout


def test_next_hpc_path_counts_only_lightning_names(tmp_path):
    def next_hpc_path(folder):  # in a process of its own: the module imports lightning
        return subprocess.run([sys.executable, "-c", "import sys; from hpclaunch.train_entry.lightning_requeue "
                               "import next_hpc_path; print(next_hpc_path(sys.argv[1]))", folder],
                              capture_output=True, text=True, check=True).stdout.strip()

    assert next_hpc_path(str(tmp_path / "missing")) == str(tmp_path / "missing" / "hpc_ckpt_1.ckpt")
    for n in ("hpc_ckpt_2.ckpt", "hpc_ckpt_10.ckpt", ".requeue-partial-5.ckpt", "last.ckpt"):
        (tmp_path / n).touch()
    assert next_hpc_path(str(tmp_path)) == str(tmp_path / "hpc_ckpt_11.ckpt")


def test_the_callback_follows_the_checkpoint_cadence_and_records_the_pace(tmp_path):
    """HPCLAUNCH_CHECKPOINT_INTERVAL_S: every rank saves at one batch end and trains on; the newest two
    hpc_ckpt files are kept (Lightning resumes from the newest); each rank writes step records."""
    run_dir = tmp_path / "run"
    (run_dir / ".hpclaunch").mkdir(parents=True)
    env = dict(HPCLAUNCH_RUN_DIR=run_dir, HPCLAUNCH_REQUEUE_FLAG=run_dir / ".hpclaunch" / "requeue-requested",
               HPCLAUNCH_REQUEUE_SIGNAL="USR2", MODE="cadence", HPCLAUNCH_CHECKPOINT_INTERVAL_S="0.05")
    done = run([sys.executable, JOB], env=rank_env(HPCLAUNCH_ATTEMPT=0, **env), timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "attempt 0 rank 0 finished at step 40" in done.stdout
    kept = sorted(n for n in os.listdir(run_dir) if n.startswith("hpc_ckpt_"))
    numbers = sorted(int(n[9:-5]) for n in kept)
    assert len(kept) == 2 and numbers[-1] >= 3 and numbers[1] == numbers[0] + 1, kept
    for rank in (0, 1):
        recs = [json.loads(line) for line in (run_dir / "metrics" / f"rank{rank}.jsonl").read_text().splitlines()]
        assert recs[0]["kind"] == "header" and recs[0]["source"] == "lightning"
        steps = [r for r in recs if r["kind"] == "step"]
        assert len(steps) == 4 and all(r["steps"] == 10 and r["step_time_s"] > 0 for r in steps), steps
        saves = [r for r in recs if r["kind"] == "checkpoint"]
        assert (len(saves) == numbers[-1]) if rank == 0 else not saves
